"""The programs behind four public PyTorch snapshots, written again so they can be predicted.

Each function below is the step a public repository ran while it recorded a snapshot that
the course keeps in ../shared/traces (PROVENANCE.md there names repository and commit).
No code is copied: they are minimal equivalents written from reading the originals, and the
original files are named in each docstring.

* ``small_from_empty``: silmont2000/assignment2-systems @ 133f064 (the snapshot itself
  is at 75d09aad), cs336_systems/trace_peak_memory.py ``main``: causal-free attention
  on random Q, K, V (batch 8, 4096 tokens, 16 features), hand-written softmax, einops
  ``einsum`` (which calls ``torch.einsum`` with the same contraction), backward of the sum.
* ``medium_training``: Wedsonlin/assignment2-systems @ 87b08641,
  cs336_systems/nsys_profile.py ``memory_profile(pattern="full-training-step")`` with the
  "medium" configuration of scripts/run_profile_configs.sh (d_model 1024, d_ff 4096, 24
  layers, 16 heads, vocabulary 10,000, context 128, batch 4, float32, 5 warm-up steps).
  The model, loss and optimizer are that repository's own cs336_basics package, imported
  from a local clone when one is given (``CS336_MEDIUM_CLONE``), never copied here.
* ``cs336_gpt_memory_run``: kkaitlyn111/cs336-a2-systems cs336_systems/benchmark.py
  ``run_memory_foward_fullstep`` (2.7B model, context 128, forward or full step), with a
  stand-in for its cs336_basics (kkaitlyn111/cs336-assignment1): see the notes above it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _softmax(x, dim=-1):
    import torch
    top = x.max(dim=dim, keepdim=True).values
    num = torch.exp(x - top)
    return num / torch.sum(num, dim=dim, keepdim=True)


def _attention(q, k, v):
    """Its own function, as in the original: its locals die when it returns."""
    import torch
    scores = torch.einsum("...qd,...kd->...qk", q, k)
    scores = scores / (q.shape[-1] ** 0.5)
    weights = _softmax(scores, -1)
    return torch.einsum("...qk,...kd->...qd", weights, v)


def small_from_empty(batch_size: int = 8, seq_len: int = 4096, d_model: int = 16):
    import torch
    q = torch.randn(batch_size, seq_len, d_model, device="cuda", requires_grad=True)
    k = torch.randn(batch_size, seq_len, d_model, device="cuda", requires_grad=True)
    v = torch.randn(batch_size, seq_len, d_model, device="cuda", requires_grad=True)
    out = _attention(q, k, v)
    loss = out.sum()
    loss.backward()
    return q, k, v, out, loss       # alive when the real snapshot was taken


MEDIUM_REPO = "Wedsonlin/assignment2-systems"
MEDIUM_COMMIT = "87b086417ea831f54f7535eb3680f90da0952722"


def medium_clone() -> Path | None:
    """A git directory of the medium run's repository (``CS336_MEDIUM_CLONE``, or the session mirror)."""
    for candidate in (os.environ.get("CS336_MEDIUM_CLONE"), "/work/.mirror/Wedsonlin+assignment2-systems/repo"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def import_cs336_basics(clone: Path):
    """That commit's cs336_basics package, checked out into a temporary folder and imported."""
    target = Path(tempfile.mkdtemp(prefix="cs336-basics-"))
    for name in ("__init__.py", "model.py", "nn_utils.py", "optimizer.py", "data.py"):
        text = subprocess.run(["git", "--git-dir", str(clone), "show",
                               f"{MEDIUM_COMMIT}:cs336-basics/cs336_basics/{name}"],
                              capture_output=True, text=True, check=True).stdout
        (target / "cs336_basics").mkdir(exist_ok=True)
        (target / "cs336_basics" / name).write_text(text)
    sys.path.insert(0, str(target))
    import cs336_basics.model
    import cs336_basics.nn_utils
    import cs336_basics.optimizer
    return cs336_basics


def medium_training(basics, mark, warmup_steps: int = 5, batch_size: int = 4, context_length: int = 128):
    """Build, warm up, then the recorded step; ``mark()`` is called where recording began."""
    import torch
    model = basics.model.BasicsTransformerLM(vocab_size=10_000, context_length=context_length, d_model=1024,
                                             num_layers=24, num_heads=16, d_ff=4096)
    model.to("cuda")
    optimizer = basics.optimizer.AdamW(model.parameters())
    vocab = model.config["vocab_size"]
    warm_x = torch.randint(0, vocab, (warmup_steps, batch_size, context_length), dtype=torch.long, device="cuda")
    run_x = torch.randint(0, vocab, (1, batch_size, context_length), dtype=torch.long, device="cuda")
    warm_y = torch.randint(0, vocab, (warmup_steps, batch_size, context_length), dtype=torch.long, device="cuda")
    run_y = torch.randint(0, vocab, (1, batch_size, context_length), dtype=torch.long, device="cuda")
    model.train()
    for i in range(warmup_steps):
        output = model(warm_x[i])
        loss = basics.nn_utils.cross_entropy(output, warm_y[i])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    del output, loss
    optimizer.zero_grad(set_to_none=True)
    mark()
    output = model(run_x[0])
    loss = basics.nn_utils.cross_entropy(output, run_y[0])
    loss.backward()
    optimizer.step()
    mark()
    return model, optimizer, output, loss


def gpt2_medium_step(batch_size: int = 8, seq_len: int = 1024):
    """A GPT-2-medium-sized training step (24 layers, d_model 1024, 16 heads, vocabulary 50,257:
    about 355M parameters) with torch's own layers and AdamW: the timing benchmark's workload."""
    import torch
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, norm_first=True, device="cuda")
    model = torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(50257, 1024, device="cuda"),
        "blocks": torch.nn.TransformerEncoder(layer, 24, enable_nested_tensor=False),
        "head": torch.nn.Linear(1024, 50257, bias=False, device="cuda")})
    optimizer = torch.optim.AdamW(model.parameters())
    tokens = torch.randint(0, 50257, (batch_size, seq_len), device="cuda")
    logits = model["head"](model["blocks"](model["embed"](tokens)))
    loss = torch.nn.functional.cross_entropy(logits.view(-1, 50257), tokens.view(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


# --- kkaitlyn111/cs336-a2-systems: the 2.7B model, context 128 -------------------------------
# cs336_systems/benchmark.py ``run_memory_foward_fullstep`` as it ran for the two snapshots: the
# snapshots' stacks put ``model(inputs)`` at its lines 221 (forward) and 229 (full step), the
# layout of commit 46eae3f8 (memory history on, reset_peak_memory_stats, empty_cache, then the
# forward or the full step).  2.7B configuration (d_model 2560, d_ff 10240, 32 layers, 32 heads),
# vocabulary 10,000, batch 4, theta 10,000.  Each snapshot is the first run of its process:
# forward at 46eae3f's loop (forward-only first, context 128 first), full step at c1c174d's (which
# calls it with forward_only=False, context 128 first; the file first appears in that commit).
# Not mixed precision, although the script has a switch for it: every allocation in both files
# has a float32 size (a Linear's output 4 x 128 x 2560 x 4 = 5,242,880 B, no 2,621,440 B bf16
# copy of it), so ``mixed_precision`` was False there (the nullcontext branch).  The stand-in
# keeps the switch; the benchmark runs it as recorded.
# The model, loss and AdamW are kkaitlyn111/cs336-assignment1's cs336_basics (transformer.py,
# training.py, optimizers.py; the snapshot's transformer.py line numbers match that file without
# its commented-out load_state_dict).  That package needs einops and jaxtyping, which the course
# does not install, so the classes below are a stand-in written from reading it: the same tensors
# on the device, made by the same torch ops in the same order (einops' einsum and rearrange become
# the torch.einsum, reshape and permute they call).  Its parameters are float32 whatever ``dtype``
# says: Linear makes its weight on the CPU (moved by ``model.to``), Embedding and RMSNorm make
# theirs in float32 on the device, RoPE its cos/sin table on the device.


def _cs336_linear(in_features, out_features):
    """cs336_basics Linear: a float32 weight of shape [in, out] made on the CPU (its values never
    reach the device: only ``model.to`` copies it there), applied by einsum."""
    import torch

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # empty, not zeros + trunc_normal_: the values never reach the device, and 2.7B
            # zeroed floats would be 10 GiB of this machine's memory.
            self.weight = torch.nn.Parameter(torch.empty(in_features, out_features))

        def forward(self, x):
            return torch.einsum("oi,...i->...o", self.weight, x)
    return Linear()


def cs336_gpt_model(d_model, num_heads, d_ff, vocab_size, context_length, num_layers, theta, device):
    import torch
    nn = torch.nn

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=torch.float32))

        def forward(self, x):
            in_dtype = x.dtype
            x = x.to(torch.float32)
            norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
            rms = torch.sqrt(norm ** 2 / d_model + 1e-5)
            x_normed = x / rms
            result = torch.einsum("d,bsd->bsd", self.weight, x_normed)
            return result.to(in_dtype)

    class RoPE(nn.Module):
        def __init__(self, d_k):
            super().__init__()
            positions = torch.arange(context_length, device=device)
            freq = 1.0 / (theta ** (torch.arange(0, d_k, 2, device=device).float() / d_k))
            angles = torch.outer(positions, freq)
            cos_sin = torch.zeros(context_length, d_k // 2, 2, device=device)
            cos_sin[:, :, 0] = torch.cos(angles)
            cos_sin[:, :, 1] = torch.sin(angles)
            self.register_buffer("cos_sin_matrix", cos_sin, persistent=False)

        def forward(self, x, token_positions):
            pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
            cos = self.cos_sin_matrix[token_positions, :, 0].unsqueeze(1)
            sin = self.cos_sin_matrix[token_positions, :, 1].unsqueeze(1)
            rotated = torch.zeros_like(pairs)
            rotated[..., 0] = cos * pairs[..., 0] - sin * pairs[..., 1]
            rotated[..., 1] = sin * pairs[..., 0] + cos * pairs[..., 1]
            return rotated.reshape(x.shape)

    def softmax(t, dim):
        max_vals = torch.max(t, dim=dim, keepdim=True)[0]
        exp = torch.exp(t - max_vals)
        total = torch.sum(exp, dim=dim, keepdim=True)
        return exp / total

    def attention(q, k, v, mask):
        """Its own function, as in the original: the scores and weights die when it returns."""
        scores = torch.einsum("...qd,...kd->...qk", q, k)
        scores = scores / (q.shape[-1] ** 0.5)
        scores = scores.masked_fill(mask == False, -1e9)    # noqa: E712 (the original's op)
        weights = softmax(scores, dim=-1)
        return torch.einsum("...qk,...kd->...qd", weights, v)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.output_proj = (_cs336_linear(d_model, d_model) for _ in range(4))
            self.rope = RoPE(d_model // num_heads)

        def heads(self, t):             # rearrange "b s (n_h d_k) -> b n_h s d_k": a view
            b, s, _ = t.shape
            return t.reshape(b, s, num_heads, -1).permute(0, 2, 1, 3)

        def forward(self, x):
            b, s, _ = x.shape
            # The projections stay named until forward returns, as in the original (its Q_x, K_x, V_x):
            # rebinding q to its rotated copy must not free the projection q is a view of.
            q_x, k_x, v_x = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            q, k, v = self.heads(q_x), self.heads(k_x), self.heads(v_x)
            positions = torch.arange(s, device=x.device).unsqueeze(0).expand(b, -1)
            q = self.rope(q, positions)
            k = self.rope(k, positions)
            mask = ~torch.triu(torch.ones(s, s, device=x.device), diagonal=1).to(torch.bool)
            mask = mask.unsqueeze(0).unsqueeze(0).expand(b, num_heads, -1, -1)
            result = attention(q, k, v, mask)
            # rearrange "b n_h s d_k -> b s (n_h d_k)": permute, then a reshape that copies
            result = result.permute(0, 2, 1, 3).reshape(b, s, d_model)
            result = self.output_proj(result)
            return result

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w2, self.w3 = _cs336_linear(d_ff, d_model), _cs336_linear(d_model, d_ff), _cs336_linear(d_ff, d_model)

        def forward(self, x):             # every intermediate named, so each lives until return
            t1 = self.w1(x)
            t3 = self.w3(x)
            t2 = torch.sigmoid(t1) * t1
            t4 = t2 * t3
            result = self.w2(t4)
            return result

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2, self.ffn = RMSNorm(), Attention(), RMSNorm(), FeedForward()

        def forward(self, x):             # h rebound as in the original: each h lives until the next
            h = self.ln1(x)
            h = self.attn(h)
            x = x + h
            h = self.ln2(x)
            h = self.ffn(h)
            x = x + h
            return x

    class TransformerLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embeddings = nn.Parameter(torch.randn(vocab_size, d_model, device=device, dtype=torch.float32))
            self.layers = nn.ModuleList(Block() for _ in range(num_layers))
            self.ln_final = RMSNorm()
            self.lm_head = _cs336_linear(vocab_size, d_model)

        def forward(self, x):
            x = self.token_embeddings[x]
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(self.ln_final(x))

    return TransformerLM()


def cs336_cross_entropy(inputs, targets):
    """cs336_basics training.py ``cross_entropy_loss`` (its batch index made on the CPU, as there)."""
    import torch
    if inputs.dim() > 2:
        inputs = inputs.reshape(-1, inputs.size(-1))
        targets = targets.reshape(-1)
    inputs_max = torch.max(inputs, dim=-1, keepdim=True).values
    inputs = inputs - inputs_max
    exp_inputs = torch.exp(inputs)                # named: it lives until the loss is returned
    exp_inputs_sum = exp_inputs.sum(dim=-1)
    batch_indices = torch.arange(inputs.shape[0])
    target_inputs = inputs[batch_indices, targets]
    losses = torch.log(exp_inputs_sum) - target_inputs
    return losses.mean()


def cs336_adamw(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01):
    """cs336_basics optimizers.py ``AdamW``: a per-parameter loop (no foreach), its state made
    with zeros_like on the first step, the denominator a new tensor per parameter."""
    import math
    import torch

    class AdamW(torch.optim.Optimizer):
        def step(self, closure=None):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad, state = p.grad.data, self.state[p]
                    if not state:
                        state.update(step=0, exp_avg=torch.zeros_like(p.data), exp_avg_sq=torch.zeros_like(p.data))
                    state["step"] += 1
                    state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** state["step"])).add_(group["eps"])
                    p.data.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1 ** state["step"]))
                    if group["weight_decay"] != 0:
                        p.data.add_(p.data, alpha=-group["lr"] * group["weight_decay"])
    return AdamW(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))


CS336_GPT_2_7B = dict(d_model=2560, d_ff=10240, num_layers=32, num_heads=32)


def cs336_gpt_memory_run(context_length: int, forward_only: bool, batch_size: int = 4, vocab_size: int = 10_000,
                         config: dict = CS336_GPT_2_7B, mixed_precision: bool = False):
    """One ``run_memory_foward_fullstep`` call: build, AdamW, a batch, then (under bf16 autocast
    when ``mixed_precision``) the recorded window: memory history on, empty_cache, one forward or
    one full step."""
    import contextlib
    import torch
    device = torch.device("cuda")
    model = cs336_gpt_model(config["d_model"], config["num_heads"], config["d_ff"], vocab_size,
                            context_length, config["num_layers"], 10_000, device)
    model.to(device)
    optimizer = cs336_adamw(model.parameters())
    batch = torch.randint(low=0, high=vocab_size, size=(batch_size, context_length)).to(device)
    casting = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if mixed_precision else contextlib.nullcontext()
    with casting:
        torch.cuda.memory._record_memory_history(max_entries=1000000)
        torch.cuda.empty_cache()
        if forward_only:
            logits = model(batch)
        else:
            optimizer.zero_grad()
            logits = model(batch)
            loss = cs336_cross_entropy(logits, batch)
            loss.backward()
            optimizer.step()
    torch.cuda.memory._dump_snapshot("unused.pickle")
    torch.cuda.memory._record_memory_history(enabled=None)



GPT_BASICS_REPO = "kkaitlyn111/cs336-assignment1"


def gpt_basics_clone() -> Path | None:
    """A git directory of the 2.7B runs' cs336_basics (``CS336_GPT_BASICS_CLONE``, or the session mirror)."""
    for candidate in (os.environ.get("CS336_GPT_BASICS_CLONE"), "/work/.mirror/kkaitlyn111+cs336-assignment1/repo"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def import_gpt_basics(clone: Path):
    """That repository's cs336_basics (transformer, optimizers, training at its newest commit), checked
    out into a temporary folder and imported: to compare the stand-in above with the real thing."""
    target = Path(tempfile.mkdtemp(prefix="cs336-gpt-basics-")) / "cs336_basics"
    target.mkdir()
    (target / "__init__.py").write_text("")
    for name in ("transformer.py", "optimizers.py", "training.py"):
        text = subprocess.run(["git", "--git-dir", str(clone), "show", f"HEAD:cs336_basics/{name}"],
                              capture_output=True, text=True, check=True).stdout
        (target / name).write_text(text)
    sys.path.insert(0, str(target.parent))
    import cs336_basics.optimizers
    import cs336_basics.training
    import cs336_basics.transformer
    return cs336_basics
