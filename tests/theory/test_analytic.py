"""Specification of the analytical model (kit/theory/analytic.py).

Model shapes are the standard Llama-2 configurations listed in PROTOCOL.md ("Models"), as in
the models' Hugging Face config.json files.
"""

import pytest

from kit.theory import analytic as analysis
from kit.theory.analytic import LlamaShape

LLAMA2_7B = LlamaShape(
    hidden_size=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=32,
    intermediate_size=11008,
    vocab_size=32000,
)
LLAMA2_13B = LlamaShape(
    hidden_size=5120,
    num_layers=40,
    num_heads=40,
    num_kv_heads=40,
    intermediate_size=13824,
    vocab_size=32000,
)
LLAMA2_70B = LlamaShape(
    hidden_size=8192,
    num_layers=80,
    num_heads=64,
    num_kv_heads=8,
    intermediate_size=28672,
    vocab_size=32000,
)

# NVIDIA A100 SXM 80GB datasheet: 312 TFLOPS dense BF16, 2,039 GB/s HBM2e (the inference device
# of llm-analysis's published examples, PROTOCOL.md).
A100_BF16_TFLOPS = 312
A100_HBM_GB_S = 2039

SEQ_LEN = 350  # the protocol's pre-training sequence length (PROTOCOL.md, stage 1)
PROMPT_LEN = 512  # the protocol's serving prompt length (PROTOCOL.md, stage 3)


# --- Shape --------------------------------------------------------------------------------------


def test_shape_reads_a_hugging_face_config():
    config = {
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    }
    assert LlamaShape.from_hf_config(config) == LLAMA2_70B


def test_shape_without_kv_heads_in_config_has_one_kv_head_per_attention_head():
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
    }
    assert LlamaShape.from_hf_config(config).num_kv_heads == 32


def test_shape_rejects_attention_heads_not_divisible_by_kv_heads():
    with pytest.raises(ValueError, match="num_kv_heads"):
        LlamaShape(
            hidden_size=4096, num_layers=1, num_heads=32, num_kv_heads=5, intermediate_size=11008, vocab_size=32000
        )


# --- Parameters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "published"),
    [(LLAMA2_7B, 6_738_415_616), (LLAMA2_13B, 13_015_864_320), (LLAMA2_70B, 68_976_648_192)],
    ids=["7B", "13B", "70B"],
)
def test_parameter_count_equals_the_published_hugging_face_count(shape, published):
    assert analysis.parameter_count(shape) == published


def test_tied_embeddings_drop_the_lm_head_from_the_count():
    tied = LLAMA2_7B.model_copy(update={"tie_embeddings": True})
    assert analysis.parameter_count(LLAMA2_7B) - analysis.parameter_count(tied) == 32000 * 4096


def test_lora_rank_64_on_every_decoder_linear_of_7b_trains_r_times_in_plus_out_weights():
    # Per layer: q, k, v, o 64 x (4096 + 4096) each; gate, up, down 64 x (4096 + 11008) each.
    per_layer = 4 * 64 * 8192 + 3 * 64 * 15104
    assert analysis.lora_parameter_count(LLAMA2_7B, rank=64) == 32 * per_layer == 159_907_840


def test_lora_rejects_an_unknown_target_module():
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        analysis.lora_parameter_count(LLAMA2_7B, rank=8, targets=("qkv_proj",))


# --- Training FLOPs -----------------------------------------------------------------------------


def test_model_flops_are_6_per_matmul_weight_plus_12_l_h_s_per_token():
    # The PaLM (appendix B) / Narayanan form 6N + 12·L·h·s, with N the weights that take part
    # in a matmul: decoder linears and the LM head.
    n_matmul = analysis.matmul_parameter_count(LLAMA2_7B)
    expected = 6 * n_matmul + 12 * 32 * 4096 * SEQ_LEN
    assert analysis.model_flops_per_token(LLAMA2_7B, SEQ_LEN) == expected


def test_6n_with_all_parameters_overcounts_exactly_the_embedding_lookup_and_the_norms():
    # 6N + 12·L·h·s with N = all 6,738,415,616 parameters is 1.9 % above the model FLOPs: the
    # input embedding (32000 x 4096) is a lookup and the 65 RMSNorm weight vectors scale element
    # by element, so neither does matmul work. The difference is exactly 6 x those weights.
    six_n = 6 * analysis.parameter_count(LLAMA2_7B) + 12 * 32 * 4096 * SEQ_LEN
    not_matmul_weights = 32000 * 4096 + (2 * 32 + 1) * 4096
    model = analysis.model_flops_per_token(LLAMA2_7B, SEQ_LEN)
    assert six_n - model == 6 * not_matmul_weights
    assert 0.018 < (six_n - model) / six_n < 0.020


def test_backward_costs_twice_the_forward():
    forward = analysis.forward_flops_per_token(LLAMA2_7B, SEQ_LEN)
    assert analysis.model_flops_per_token(LLAMA2_7B, SEQ_LEN) == 3 * forward


def test_hardware_flops_equal_model_flops_without_recomputation():
    assert analysis.hardware_flops_per_token(LLAMA2_7B, SEQ_LEN, recompute=False) == (
        analysis.model_flops_per_token(LLAMA2_7B, SEQ_LEN)
    )


def test_recomputation_adds_exactly_one_forward_of_the_decoder_layers():
    extra = analysis.hardware_flops_per_token(LLAMA2_7B, SEQ_LEN, recompute=True) - (
        analysis.hardware_flops_per_token(LLAMA2_7B, SEQ_LEN, recompute=False)
    )
    assert extra == analysis.decoder_forward_flops_per_token(LLAMA2_7B, SEQ_LEN)
    assert extra == analysis.forward_flops_per_token(LLAMA2_7B, SEQ_LEN) - 2 * 4096 * 32000


def test_grouped_query_attention_does_not_reduce_attention_flops():
    mha_70b = LLAMA2_70B.model_copy(update={"num_kv_heads": 64})
    assert analysis.attention_matmul_flops_per_token(LLAMA2_70B, 4096) == (
        analysis.attention_matmul_flops_per_token(mha_70b, 4096)
    )


# --- Inference FLOPs and bytes ------------------------------------------------------------------


def test_7b_kv_cache_takes_half_a_mebibyte_per_token_in_16_bits():
    # 2 (K and V) x 32 layers x 4096 x 2 bytes.
    assert analysis.kv_cache_bytes(LLAMA2_7B, tokens=1, bytes_per_elem=2) == 512 * 1024


def test_70b_kv_cache_with_8_kv_heads_is_8_times_smaller_than_with_64():
    mha_70b = LLAMA2_70B.model_copy(update={"num_kv_heads": 64})
    gqa = analysis.kv_cache_bytes(LLAMA2_70B, tokens=4096, bytes_per_elem=2)
    assert analysis.kv_cache_bytes(mha_70b, tokens=4096, bytes_per_elem=2) == 8 * gqa


def test_prefill_runs_the_lm_head_once_for_the_first_sampled_token():
    decoder = analysis.decoder_forward_flops_per_token(LLAMA2_7B, PROMPT_LEN)
    assert analysis.prefill_flops(LLAMA2_7B, PROMPT_LEN) == PROMPT_LEN * decoder + 2 * 4096 * 32000


def test_decode_step_reads_the_weights_once_for_the_whole_batch():
    one = analysis.decode_step_bytes(LLAMA2_7B, PROMPT_LEN, 1, 2, 2)
    two = analysis.decode_step_bytes(LLAMA2_7B, PROMPT_LEN, 2, 2, 2)
    assert two - one == analysis.kv_cache_bytes(LLAMA2_7B, PROMPT_LEN, 2)


def test_serving_memory_is_weights_plus_the_kv_cache_of_every_sequence():
    memory = analysis.serving_memory(LLAMA2_7B, batch=8, context_len=1024, weight_bytes=2, kv_bytes=2)
    assert memory.weights == 2 * 6_738_415_616
    assert memory.kv_cache == 8 * 1024 * 512 * 1024
    assert memory.total == memory.weights + memory.kv_cache


# --- Training memory ----------------------------------------------------------------------------

PSI_7B = 6_738_415_616


def _memory(**overrides):
    options = {"world_size": 8, "zero_stage": 0, "micro_batch": 1, "seq_len": SEQ_LEN}
    options.update(overrides)
    return analysis.training_memory_per_gpu(LLAMA2_7B, **options)


def test_data_parallel_without_zero_holds_2_2_4_and_12_bytes_per_parameter():
    memory = _memory(zero_stage=0)  # bf16 weights and gradients, fp32 gradients, fp32 master + Adam
    assert (memory.weights, memory.gradients, memory.optimizer_states) == (
        2 * PSI_7B,
        (2 + 4) * PSI_7B,
        12 * PSI_7B,
    )


def test_zero2_divides_gradients_and_optimizer_states_by_world_size():
    memory = _memory(zero_stage=2)
    assert (memory.weights, memory.gradients, memory.optimizer_states) == (
        2 * PSI_7B,
        (2 + 4) * PSI_7B / 8,
        12 * PSI_7B / 8,
    )
    assert memory.gathered_parameters == 0


def test_zero3_also_divides_the_weights_and_gathers_the_largest_layer():
    memory = _memory(zero_stage=3)
    assert (memory.weights, memory.gradients, memory.optimizer_states) == (
        2 * PSI_7B / 8,
        4 * PSI_7B / 8,
        12 * PSI_7B / 8,
    )
    assert memory.gathered_parameters == 4 * 32000 * 4096  # the embedding (or LM head), 4 bytes each


def test_zero_does_not_partition_activations():
    assert _memory(zero_stage=0).activations == _memory(zero_stage=3).activations


def test_optimizer_offload_moves_optimizer_states_and_gradients_to_host():
    memory = _memory(zero_stage=2, offload_optimizer=True)
    assert memory.optimizer_states == memory.gradients == 0
    assert memory.offloaded_to_host == 18 * PSI_7B / 8
    assert memory.weights == 2 * PSI_7B


def test_parameter_offload_with_zero3_keeps_only_the_gathered_layers_on_the_gpu():
    memory = _memory(zero_stage=3, offload_optimizer=True, offload_params=True)
    assert memory.weights == memory.gradients == memory.optimizer_states == 0
    assert memory.offloaded_to_host == 18 * PSI_7B / 8
    assert memory.model_states == memory.gathered_parameters > 0  # never 0 bytes of GPU memory
    assert memory.total == memory.activations + memory.gathered_parameters


def test_parameter_offload_needs_zero3():
    with pytest.raises(ValueError, match="stage 3"):
        _memory(zero_stage=2, offload_params=True)


def test_lora_keeps_gradients_and_optimizer_states_only_for_the_adapters():
    adapters = analysis.lora_parameter_count(LLAMA2_7B, rank=64)
    memory = _memory(world_size=1, peft="lora", lora_rank=64)
    assert memory.weights == 2 * (PSI_7B + adapters)
    assert memory.gradients == (2 + 4) * adapters
    assert memory.optimizer_states == 12 * adapters


# DeepSpeed's own estimators of the GPU memory of model states (runtime/zero/stage_1_and_2.py and
# stage3.py; the *_all_live variants take these totals from a model object).
ZERO_SETUPS = [(2, False, False), (2, True, False), (3, False, False), (3, True, False), (3, True, True)]


def deepspeed_estimate(shape, world_size, stage, offload_optimizer, offload_params, total_params=None, largest=None):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total_params = total_params or analysis.parameter_count(shape)
    largest = largest or analysis.largest_layer_parameter_count(shape)
    if stage == 2:
        return estimate_zero2_model_states_mem_needs(total_params, world_size, 1, cpu_offload=offload_optimizer)[1]
    return estimate_zero3_model_states_mem_needs(
        total_params, largest, world_size, 1, cpu_offload=offload_optimizer, cpu_offload_params=offload_params
    )[1]


@pytest.mark.parametrize("model", ["llama2-7b", "llama2-13b", "llama2-70b"])
@pytest.mark.parametrize("world_size", [1, 2, 8])
@pytest.mark.parametrize("stage, offload_optimizer, offload_params", ZERO_SETUPS)
def test_model_states_are_within_5_percent_of_deepspeeds_estimators(
    protocol, model, world_size, stage, offload_optimizer, offload_params
):
    pytest.importorskip("deepspeed")
    shape = protocol.models[model]
    memory = analysis.training_memory_per_gpu(
        shape,
        world_size=world_size,
        zero_stage=stage,
        micro_batch=1,
        seq_len=SEQ_LEN,
        offload_optimizer=offload_optimizer,
        offload_params=offload_params,
    )
    estimate = deepspeed_estimate(shape, world_size, stage, offload_optimizer, offload_params)
    assert memory.model_states == pytest.approx(estimate, rel=0.05)


def test_the_largest_layer_is_the_one_deepspeed_finds_in_a_real_model(protocol):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import model_to_params
    from transformers import LlamaForCausalLM

    from kit.workloads.synthetic import llama_config

    shape = protocol.models["tiny-llama"]
    total, largest = model_to_params(LlamaForCausalLM(llama_config(shape)))
    assert (total, largest) == (analysis.parameter_count(shape), analysis.largest_layer_parameter_count(shape))


def test_qlora_double_quantisation_costs_4_127_bits_per_quantised_weight():
    # Dettmers et al. 2023, sec. 3: 4-bit NF4 + 8/64 + 32/(64·256) bits of constants.
    assert analysis.quantized_bits_per_param(4) == pytest.approx(4.127, abs=5e-4)


def test_qlora_quantises_the_decoder_linears_and_keeps_embedding_head_and_norms_in_16_bits():
    linears = analysis.decoder_linear_parameter_count(LLAMA2_7B)
    expected = linears * analysis.quantized_bits_per_param(4) / 8 + (PSI_7B - linears) * 2
    assert analysis.base_weight_bytes(LLAMA2_7B, 2, quant_bits=4) == expected


def test_qlora_7b_base_weights_take_about_half_a_byte_per_parameter():
    per_param = analysis.base_weight_bytes(LLAMA2_7B, 2, quant_bits=4) / PSI_7B
    assert 0.5 < per_param < 0.6  # 0.516 for the quantised linears, 2 for the remaining 3.9 %


def test_layer_activations_follow_korthikanti_adapted_to_llama():
    # sb(6h + 2·kv_dim + 4i) 16-bit elements plus the a·s²·b softmax output, for 7B at
    # s=350, b=1: 350 x (6·4096 + 2·4096 + 4·11008) x 2 + 32 x 350² x 2 bytes.
    assert analysis.layer_activation_bytes(LLAMA2_7B, 1, SEQ_LEN) == 53_760_000 + 7_840_000


def test_flash_attention_replaces_the_score_matrix_by_an_fp32_log_sum_exp():
    eager = analysis.layer_activation_bytes(LLAMA2_7B, 1, SEQ_LEN)
    flash = analysis.layer_activation_bytes(LLAMA2_7B, 1, SEQ_LEN, flash_attention=True)
    assert eager - flash == 32 * SEQ_LEN**2 * 2 - 4 * 32 * SEQ_LEN


def test_full_recomputation_keeps_each_layer_input_and_one_layer_of_activations():
    layer = analysis.layer_activation_bytes(LLAMA2_7B, 2, SEQ_LEN)
    outside = 2 * 2 * SEQ_LEN * 4096 * 2 + 4 * 2 * SEQ_LEN * 32000
    with_recompute = analysis.training_activation_bytes(LLAMA2_7B, 2, SEQ_LEN, recompute=True)
    without = analysis.training_activation_bytes(LLAMA2_7B, 2, SEQ_LEN, recompute=False)
    assert with_recompute == 32 * (2 * SEQ_LEN * 4096 * 2) + layer + outside
    assert without == 32 * layer + outside


# --- Roofline -----------------------------------------------------------------------------------


def test_predicted_step_time_runs_at_the_given_fraction_of_peak():
    assert analysis.predicted_step_time(156e12, peak_tflops=312, flops_efficiency=0.5) == 1.0


def test_decode_of_one_sequence_is_memory_bound():
    bound = analysis.decode_latency_lower_bound(
        LLAMA2_7B, PROMPT_LEN, batch=1, peak_tflops=A100_BF16_TFLOPS, bandwidth_gb_s=A100_HBM_GB_S
    )
    assert bound.limited_by == "memory"
    assert bound.seconds == bound.memory_s


def test_prefill_of_a_512_token_prompt_is_compute_bound():
    bound = analysis.prefill_latency_lower_bound(
        LLAMA2_7B, PROMPT_LEN, batch=1, peak_tflops=A100_BF16_TFLOPS, bandwidth_gb_s=A100_HBM_GB_S
    )
    assert bound.limited_by == "compute"


# --- Derived metrics ----------------------------------------------------------------------------


def test_achieved_tflops_is_flops_per_token_times_tokens_per_second_over_10_12():
    assert analysis.achieved_tflops(flops_per_token=4e10, tokens_per_s=5000) == 200


def test_mfu_is_a_fraction_of_the_summed_peak_of_all_devices():
    assert analysis.mfu(achieved_tflops=1248, peak_tflops_per_device=312, devices=8) == 0.5


def test_mfu_above_one_is_returned_for_the_caller_to_flag_not_clipped():
    assert analysis.mfu(achieved_tflops=400, peak_tflops_per_device=312, devices=1) > 1


def test_scaling_efficiency_compares_n_devices_with_n_times_one():
    efficiency = analysis.scaling_efficiency(throughput_n=7.264, throughput_1=1.0, devices=8)
    assert efficiency == pytest.approx(0.908)
