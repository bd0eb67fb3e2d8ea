"""predict on an Ascend NPU: the recorded requests replayed on torch_npu's design (predict/forecast.py),
and the prediction saying what it models and what it does not (npu_scope)."""
import pytest

torch = pytest.importorskip("torch", reason="predict needs the optional torch CPU wheel (pip install torch)")

from allocator_ref.editions import language as lang          # noqa: E402
from allocator_ref.predict import predict                     # noqa: E402
from allocator_ref.predict.unseen import cublas_workspace_bytes  # noqa: E402

PAD_UNIT = 512          # torch_npu: 32 B of padding, then 512 B rounding: a multiple of 512 takes one more unit


def known_step():
    """Four requests live at the peak, each a multiple of 512 B (float32)."""
    w = torch.empty(256, 128, device="cuda")          # 131,072 B
    x = torch.empty(64, 256, device="cuda")           # 65,536 B
    y = x @ w                                         # 32,768 B, then the cuBLAS workspace
    del x
    return y.relu()


def test_an_atlas_profile_replays_the_requests_on_torch_npus_design():
    npu = predict(known_step, profile="atlas-800t-a2-64gb")
    cuda = predict(known_step, profile="atlas-800t-a2-64gb", policy="caching")
    assert (npu.policy, cuda.policy) == ("npu", "caching")
    assert cublas_workspace_bytes("atlas-800t-a2-64gb") % PAD_UNIT == 0
    # w, x, y and the workspace are live at the allocated peak: each takes 512 B more on the NPU
    assert npu.peak_allocated - cuda.peak_allocated == 4 * PAD_UNIT
    def live(prediction):       # what is left at the end: the cuBLAS workspace, kept until clearCublasWorkspaces
        return [b["size"] for seg in prediction.snapshot["segments"] for b in seg["blocks"] if b["state"] != "inactive"]
    workspace = cublas_workspace_bytes("atlas-800t-a2-64gb")
    assert live(npu) == [workspace + PAD_UNIT] and live(cuda) == [workspace]
    assert npu.what_if == [] and cuda.what_if          # PyTorch's what-if rows are not an NPU's
    assert npu.to_json()["npu_scope"] and cuda.to_json()["npu_scope"] is None


def test_policy_npu_works_on_any_profile_and_a_bad_policy_is_refused():
    assert predict(known_step, profile="h100-80gb", policy="npu", what_if=False).policy == "npu"
    with pytest.raises(ValueError, match="policy 'stream_ordered' is not one; give caching"):
        predict(known_step, profile="h100-80gb", policy="stream_ordered")


def test_the_prediction_says_what_it_models_on_an_npu_in_both_languages():
    text = predict(known_step, profile="atlas-300i-duo-48gb", what_if=False).text()
    for words in ("torch_npu's caching allocator", "32 B of padding", "not modelled", "NPUWorkspaceAllocator",
                  "HCCL"):
        assert words in text, words
    with lang.speaking("zh"):
        chinese = predict(known_step, profile="atlas-300i-duo-48gb", what_if=False).text()
    assert "NPUWorkspaceAllocator" in chinese and "未建模" in chinese
    assert "torch_npu's caching allocator" not in predict(known_step, profile="h100-80gb", what_if=False).text()
