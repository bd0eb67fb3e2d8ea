"""The programs behind two public PyTorch snapshots, written again so they can be predicted.

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
