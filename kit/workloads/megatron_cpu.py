"""What megatron-core (0.16) needs to train on a CPU, in one place; imported only for CPU cases.

megatron-core assumes CUDA throughout. Each adaptation below meets one assumption, and none of
them changes what is computed: the same model, parallel layout, gradient reduction and optimizer
run on CPU tensors over gloo. Never used on a GPU, where megatron-core runs as published.
"""

from __future__ import annotations

import contextlib


def adapted():
    """A context in which megatron-core's CUDA assumptions hold on the CPU."""
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaNamesToCpu(TorchFunctionMode):
        """Tensors megatron-core places with a `device='cuda'` literal (the distributed optimizer's
        overflow buffer, gradient clipping, the pipeline schedules) or `.cuda()` go to the CPU; and
        `Tensor.type()` answers with the CUDA type name, which the distributed optimizer checks to
        tell fp32 from half parameters (torch.cuda.FloatTensor, ...)."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to and len(args) > 1 and str(args[1]).startswith("cuda"):
                args = (args[0], "cpu", *args[2:])
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                name = func(*args)
                return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
            return func(*args, **kwargs)

    @contextlib.contextmanager
    def context():
        # `torch.cuda.current_device()` places the gradient buffers, RoPE's frequencies and the
        # layers' parameters: on a CPU build it raises, so it names the CPU instead.
        current_device = torch.cuda.current_device
        torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[return-value]  # torch types it as an index
        try:
            with CudaNamesToCpu():
                yield
        finally:
            torch.cuda.current_device = current_device

    return context()


# TransformerConfig flags that keep megatron-core off its CUDA-only fused kernels (Apex or TE
# fusions of bias+activation, softmax, layer norm, bias+dropout, RoPE, and the gradient
# accumulation into main_grad), whose unfused PyTorch forms compute the same.
UNFUSED = {
    "bias_activation_fusion": False,
    "masked_softmax_fusion": False,
    "persist_layer_norm": False,
    "bias_dropout_fusion": False,
    "apply_rope_fusion": False,
    "gradient_accumulation_fusion": False,
}
# model_parallel_cuda_manual_seed registers a CUDA RNG state unless told the tracker is for
# inference, which keeps the states as torch's CPU generator states.
SEED_OPTIONS = {"inference_rng_tracker": True}
