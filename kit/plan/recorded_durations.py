"""How long each case of the smoke profile took in a recorded run, the estimate of a CPU case
without an earlier run on this host: `kit run --all` (the smoke profile) at kit commit c7ddf31 on a 2-core CPU machine (AMD EPYC, 23.5 GiB), the
docker engine there, 2026-11-29 (result.json's finished_at - started_at, whole seconds: 129 s
for the 30 cases, 339 s from the run's start to its end, the preflight included)."""

RECORDED_ON = "a recorded smoke run on a 2-core CPU machine (kit c7ddf31)"
CPU_CASE_SECONDS: dict[str, float] = {
    "comm.all_gather.g2.p2p-off": 0,
    "comm.all_gather.g2": 1,
    "comm.all_reduce.g2.p2p-off": 2,
    "comm.all_reduce.g2": 1,
    "comm.reduce.g2.p2p-off": 1,
    "comm.reduce.g2": 1,
    "comm.reduce_scatter.g2.p2p-off": 0,
    "comm.reduce_scatter.g2": 1,
    "finetune.tiny-llama.l+f.g2": 0,
    "finetune.tiny-llama.l+r.g2": 3,
    "finetune.tiny-llama.l+z3+o.g2": 5,
    "finetune.tiny-llama.l.g2": 4,
    "finetune.tiny-llama.ql+z2.g2": 4,
    "finetune.tiny-llama.ql.g2": 3,
    "maxbatch.tiny-llama.naive.g1": 25,
    "pretrain.tiny-llama.f.g2": 0,
    "pretrain.tiny-llama.megatron+tp2.g2": 6,
    "pretrain.tiny-llama.naive.g2": 2,
    "pretrain.tiny-llama.q.g2": 4,
    "pretrain.tiny-llama.r.g2": 1,
    "pretrain.tiny-llama.z2+o.g2": 3,
    "pretrain.tiny-llama.z2.g2": 4,
    "pretrain.tiny-llama.z3+o.g2": 4,
    "pretrain.tiny-llama.z3.g2": 5,
    "profile.tiny-llama.base.g1": 1,
    "profile.tiny-llama.f.g1": 0,
    "profile.tiny-llama.r.g1.b16": 2,
    "scaling.tiny-llama.q.g1.b2": 2,
    "scaling.tiny-llama.q.g2.b2": 4,
    "serve.tiny-llama.vllm.g1": 40,
}
