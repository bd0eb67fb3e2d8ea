"""``torch.autocast("cuda")`` on meta tensors: the same casts, so the same allocations.

PyTorch's autocast is a dispatch key (``AutocastCUDA``) that only CUDA tensors carry
(``is_autocast_eligible`` in aten/src/ATen/autocast_mode.h), so on ``meta`` it would do
nothing, and on a CPU build ``torch.autocast("cuda", dtype=torch.bfloat16)`` fails before it
starts (``torch.cuda.is_bf16_supported`` needs a GPU).  While recording, ``torch.autocast``,
``torch.amp.autocast`` and ``torch.cuda.amp.autocast`` for ``"cuda"`` become ``autocast``
below: a ``TorchFunctionMode`` that applies autocast's CUDA cast policy per op, above
autograd as the real key is (so casts are saved for backward exactly as on a GPU):

* lower_precision_fp ops (GEMMs, convolutions, attention): every eligible input cast to the
  region's dtype; fp32 leaf tensors that require grad (the weights) through the weight-cast
  cache, kept until the outermost region exits (autocast_mode.cpp ``cached_cast``,
  ``clear_cache``);
* fp32 ops (norms, losses, exp/log/pow ...): eligible inputs cast to float32, not cached;
* fp32_set_opt_dtype ops (softmax, log_softmax, sum, cumsum, prod, norms): ``dtype=float32``
  when the caller gave none and the first input is eligible;
* promote ops (cat-like: addcmul, addcdiv, index_put, scatter_add ...): the widest input type.

The op lists are AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE and
AT_FORALL_PROMOTE of aten/src/ATen/autocast_mode.h (read in torch 2.13's installed header; the
same lists in 2.11 except rms_norm, added to fp32 in 2.6).  ``GradScaler`` needs no stand-in: its
only host read (``found_inf.item()`` in ``_maybe_opt_step``) gets 0, "no inf", so the optimizer
steps as in the usual iteration.
"""
from __future__ import annotations

import inspect
import weakref
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from .patching import patched

LOWER_PRECISION_FP = {
    "_convolution", "convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm",
    "mv", "linalg_vecdot", "vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention"}
FP32 = {
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d"}
FP32_SET_OPT_DTYPE = {"prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                      "vector_norm", "linalg_matrix_norm", "matrix_norm", "sum"}
PROMOTE = {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "tensordot", "scatter_add"}
# Python spellings of the same ATen ops (Tensor dunders call them).
ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow",
           "__ipow__": "pow"}

_REGIONS: list = []        # (enabled, dtype, cache_enabled) of the autocast regions entered, innermost last
_CACHE: dict = {}          # id(fp32 weight) -> (weakref to it, its cast): the weight-cast cache
_CASTING = [False]         # True while a cast for autocast runs (the recorder counts those)


def casting() -> bool:
    return _CASTING[0]


def _region():
    return _REGIONS[-1] if _REGIONS else None


def _eligible(t) -> bool:
    """is_eligible: a floating tensor of the autocast device (cuda: here, meta), not double."""
    return (isinstance(t, torch.Tensor) and t.device.type == "meta" and t.is_floating_point()
            and t.dtype != torch.float64)


def _cast(t, dtype, lower):
    """autocast_mode.cpp ``cached_cast``: fp32 weights (leaf, requires grad, no view) to the lower
    type are cast once per region and kept; anything else is cast each time."""
    if not _eligible(t) or t.dtype == dtype:
        return t
    cacheable = (dtype == lower and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
                 and not t._is_view() and _region()[2])
    if cacheable and id(t) in _CACHE and _CACHE[id(t)][0]() is t:
        return _CACHE[id(t)][1]
    _CASTING[0] = True
    try:
        out = t.to(dtype)
    finally:
        _CASTING[0] = False
    if cacheable:
        _CACHE[id(t)] = (weakref.ref(t), out)
    return out


def _map(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(fn(v) if isinstance(v, torch.Tensor) else v for v in value)
    return value


def _tensors(args, kwargs):
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


class AutocastOnMeta(TorchFunctionMode):
    """The CUDA cast policy per op, for the innermost enabled region (see the module's docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        region = _region()
        name = getattr(func, "__name__", "")
        name = ALIASES.get(name, name)
        if region is None or not region[0]:
            return func(*args, **kwargs)
        lower = region[1]
        if name == "cross_entropy":
            return self._cross_entropy(func, args, kwargs, lower)
        if name in LOWER_PRECISION_FP:
            cast = lambda t: _cast(t, lower, lower)
        elif name in FP32:
            cast = lambda t: _cast(t, torch.float32, lower)
        elif name in FP32_SET_OPT_DTYPE:
            if args and _eligible(args[0]) and kwargs.get("dtype") is None:
                kwargs["dtype"] = torch.float32
            return func(*args, **kwargs)
        elif name in PROMOTE:
            widest = torch.float32 if any(_eligible(t) and t.dtype == torch.float32
                                          for t in _tensors(args, kwargs)) else lower
            cast = lambda t: _cast(t, widest, lower)
        else:
            # Not an autocast op.  A Python-level function's body (F.multi_head_attention_forward's
            # linears) runs with this mode popped, so its inner GEMMs are not cast: a known gap.
            return func(*args, **kwargs)
        # inside an autocast op the key is excluded (ExcludeDispatchKeyGuard no_autocast): no re-entry
        return func(*[_map(a, cast) for a in args], **{k: _map(v, cast) for k, v in kwargs.items()})

    def _cross_entropy(self, func, args, kwargs, lower):
        """cross_entropy is no autocast op, but its ATen body (LossNLL.cpp cross_entropy_loss) calls
        ``log_softmax(self, class_dim, self.scalar_type())`` (an explicit dtype: autocast keeps it)
        and ``nll_loss`` (fp32: the log-probabilities cast to float32).  Done the same way here."""
        bound = inspect.signature(torch.nn.functional.cross_entropy).bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        x, target = a["input"], a["target"]
        if not _eligible(x) or target.is_floating_point() or a["label_smoothing"] or a["size_average"] is not None \
                or a["reduce"] is not None:
            return func(*args, **kwargs)
        log_probs = torch.log_softmax(x, 0 if x.dim() == 1 else 1, dtype=x.dtype)
        cast = lambda t: _cast(t, torch.float32, lower)              # nll_loss: fp32 policy
        return torch.nn.functional.nll_loss(_map(log_probs, cast), target, _map(a["weight"], cast),
                                            ignore_index=a["ignore_index"], reduction=a["reduction"])


class autocast:
    """``torch.autocast`` while recording: for ``"cuda"``, AutocastOnMeta; any other device as before."""

    _original = None            # the real torch.autocast class, set by stand_ins()

    def __init__(self, device_type="cuda", dtype=None, enabled=True, cache_enabled=None):
        self.device_type = device_type
        self.dtype = dtype if dtype is not None else torch.float16   # get_autocast_dtype(CUDA) = kHalf
        self.enabled = bool(enabled)
        self.cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        self._real = None
        self._mode = None
        if device_type != "cuda":
            self._real = autocast._original(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        elif self.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"autocast dtype {self.dtype}: CUDA autocast takes torch.float16 or torch.bfloat16")

    def __enter__(self):
        if self._real is not None:
            return self._real.__enter__()
        _REGIONS.append((self.enabled, self.dtype, self.cache_enabled))
        if len(_REGIONS) == 1:                 # the outermost region pushes the mode
            self._mode = AutocastOnMeta()
            self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self._real is not None:
            return self._real.__exit__(*exc)
        _REGIONS.pop()
        if self._mode is not None:
            self._mode.__exit__(*exc)
            _CACHE.clear()                     # autocast_decrement_nesting() == 0 -> clear_autocast_cache()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)
        return decorated


def _cuda_amp_autocast(enabled=True, dtype=torch.float16, cache_enabled=True):
    """``torch.cuda.amp.autocast(...)`` (deprecated spelling of torch.autocast("cuda", ...))."""
    return autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


@contextmanager
def stand_ins():
    """torch.autocast, torch.amp.autocast and torch.cuda.amp.autocast as ``autocast`` above."""
    import torch.amp
    import torch.cuda.amp
    autocast._original = torch.amp.autocast_mode.autocast
    patches = [(torch, "autocast", autocast), (torch.amp, "autocast", autocast),
               (torch.cuda.amp, "autocast", _cuda_amp_autocast)]
    try:
        with patched(patches):
            yield
    finally:
        _REGIONS.clear()
        _CACHE.clear()
