"""Communication: the collectives, a sweep's rows, nccl-tests' output, the GPU links and the bound a bus bandwidth is held to."""
