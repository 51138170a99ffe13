"""Each workload a case can name that runs in a workload process, and the module that runs it there
(kit.workloads.harness imports it by name); "serve" is driven by the kit itself (kit.serve.session).

Apart from kit.plan.protocol and the workloads package, so that the host's checks (kit.host.this_host, which
`kit list` runs on the plan cache's cases) know them without importing pydantic or a framework.
"""

WORKLOADS = {
    "train": "kit.workloads.train",
    "comm": "kit.workloads.collective_sweep",
    "profile": "kit.workloads.step_timeline",
    "calibrate": "kit.workloads.calibrate",
    "sdc": "kit.workloads.sdc_check",
}
