"""The protocol as data and the plan of cases made from it: the manifests' models, fitting to a host, what a case must need (predictions), how long it takes, and the plan as text."""
