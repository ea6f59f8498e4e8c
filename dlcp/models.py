"""The models DLCP trains (``dlcp train --model``) and sizes (the simulator), named once.

:data:`MODELS` is the one list of names: ``dlcp train``, ``dlcp demo`` and ``dlcp testbed bench`` offer its keys,
and the training loop builds from it. The networks are written in plain ``torch.nn`` (no torchvision wheel
matches the pinned torch without pulling a CUDA build); torch is imported inside the builders only, so the core
imports no torch. Three families:

* ``mlp``: fully connected, on a 64-dimensional Gaussian-mixture task (10 classes).
* ``resnet``: a ResNet (He et al.) with basic blocks, CIFAR stem (one 3x3 convolution, no max-pool) for 32x32
  images, widths ``w, 2w, 4w, 8w`` per stage; ``resnet18`` is ResNet-18's layout (2 blocks per stage) at
  ``w = 16`` by default (0.70M parameters; ``w = 64`` is the usual 11.2M). The simulator's ResNet-50 is the
  same builder with bottleneck blocks and the ImageNet stem (:func:`resnet`).
* ``gpt``: a decoder-only transformer (GPT-2 layout: token and position embeddings, pre-norm blocks of causal
  self-attention and a 4x MLP, a final norm and a linear head), trained on next-token prediction.

A *layer* for DLCP's priorities is a module in forward order (``dlcp.host.shim.torch`` records it): the stem or
the embeddings come first and get the top class.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["mlp", "resnet", "gpt"]

IMAGE_SHAPE = (3, 32, 32)
"""One image of the ``resnet`` family's task: channels, height, width."""
FEATURES = 64
"""Inputs of the ``mlp`` family's task."""
CLASSES = 10
"""Classes of the ``mlp`` and ``resnet`` families' tasks."""


@dataclass(frozen=True)
class ModelSpec:
    """One trainable model: its family, shape and what its task is made of."""

    family: Family
    summary: str
    """For ``--help``: the size in parameters."""
    hidden: tuple[int, ...] = ()
    """``mlp``: the hidden layers' widths."""
    depths: tuple[int, ...] = ()
    """``resnet``: basic blocks per stage; ``gpt``: ``(blocks,)``."""
    width: int = 0
    """``resnet``: channels of the first stage; ``gpt``: the embedding width. ``dlcp train --width`` overrides it."""
    heads: int = 0
    """``gpt``: attention heads (they divide the width)."""
    vocab: int = 0
    """``gpt``: tokens in the vocabulary."""
    context: int = 0
    """``gpt``: tokens per sequence."""
    bucket_mb: float = 25.0
    """DDP's bucket cap for this model (``bucket_cap_mb``; 25 is DDP's default). The ResNet's is small so that
    its 2.8 MB of gradients span several buckets, as a ResNet-50's 100 MB do under DDP's default."""
    test_samples: int = 2048
    """Held-out samples (sequences for ``gpt``) of the final accuracy."""
    eval_samples: int = 512
    """Held-out samples of each accuracy measurement during training (``--eval-every``)."""

    @property
    def widened(self) -> bool:
        """Whether ``--width`` applies (``resnet`` and ``gpt``)."""
        return self.family != "mlp"

    @property
    def accuracy(self) -> str:
        """What the reported accuracy is (the same measure feeds time to accuracy)."""
        if self.family == "gpt":
            return "next-token top-1 accuracy on held-out sequences"
        return "top-1 classification accuracy on the held-out set"


MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec("mlp", "~50k parameters", hidden=(256, 128)),
    "mlp-wide": ModelSpec("mlp", "~600k parameters", hidden=(1024, 512)),
    "mlp-large": ModelSpec("mlp", "~10.5M parameters", hidden=(3200, 3200)),
    "resnet18": ModelSpec(
        "resnet",
        "ResNet-18 layout on 32x32 images, width 16: ~0.70M parameters",
        depths=(2, 2, 2, 2),
        width=16,
        bucket_mb=0.5,
        test_samples=512,
        eval_samples=128,
    ),
    "gpt": ModelSpec(
        "gpt",
        "GPT-style, 2 blocks, width 64, 4 heads, 64 tokens of context: ~0.11M parameters",
        depths=(2,),
        width=64,
        heads=4,
        vocab=64,
        context=64,
        test_samples=256,
        eval_samples=64,
    ),
}
"""Every model ``dlcp train --model`` trains, by name."""


def spec(name: str) -> ModelSpec:
    """The model ``name``; :class:`ValueError` naming the choices for any other name."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    return MODELS[name]


def check_width(m: ModelSpec, width: int) -> int:
    """The width a model is built with (``width``, or the model's own for 0); :class:`ValueError` if it cannot be."""
    if width == 0:
        return m.width
    if not m.widened:
        raise ValueError(f"--width applies to the resnet and gpt models, not to an mlp (got {width})")
    if width < 1 or width > 1024:
        raise ValueError(f"--width must be in 1..1024, got {width}")
    if m.family == "gpt" and width % m.heads:
        raise ValueError(f"--width must be a multiple of the {m.heads} attention heads, got {width}")
    return width


def build(name: str, width: int = 0) -> Any:
    """A fresh ``torch.nn.Module`` of model ``name`` (``width`` 0: the model's own), on torch's current device
    and with its current random state (seed it first)."""
    m = spec(name)
    w = check_width(m, width)
    if m.family == "mlp":
        return mlp(FEATURES, m.hidden, CLASSES)
    if m.family == "resnet":
        return resnet(m.depths, w, CLASSES)
    return gpt(m.vocab, m.context, w, m.depths[0], m.heads)


def mlp(inputs: int, hidden: tuple[int, ...], outputs: int) -> Any:
    from torch import nn

    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(inputs, h), nn.ReLU()]
        inputs = h
    return nn.Sequential(*layers, nn.Linear(inputs, outputs))


def resnet(
    depths: tuple[int, ...],
    width: int,
    classes: int,
    *,
    bottleneck: bool = False,
    imagenet_stem: bool = False,
) -> Any:
    """A ResNet as one ``nn.Sequential`` in forward order: stem, blocks, pooling, the classifier.

    ``bottleneck``: 1x1-3x3-1x1 blocks with 4x expansion (ResNet-50 and up), else two 3x3 convolutions (ResNet-18,
    -34). ``imagenet_stem``: a 7x7 stride-2 convolution and a max-pool (224x224 inputs), else one 3x3 convolution
    (32x32 inputs). Stage ``i`` has ``width * 2**i`` channels (times 4 out of a bottleneck) and halves the
    resolution from the second stage on.
    """
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            expansion = 4 if bottleneck else 1
            cout = mid * expansion
            if bottleneck:
                self.conv1, self.bn1 = conv_bn(cin, mid, 1)
                self.conv2, self.bn2 = conv_bn(mid, mid, 3, stride)
                self.conv3, self.bn3 = conv_bn(mid, cout, 1)
            else:
                self.conv1, self.bn1 = conv_bn(cin, mid, 3, stride)
                self.conv2, self.bn2 = conv_bn(mid, cout, 3)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.cout = cout

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if bottleneck:
                out = self.bn3(self.conv3(self.relu(out)))
            return self.relu(out + (x if self.down is None else self.down(x)))

    if imagenet_stem:
        layers: list[nn.Module] = [*conv_bn(3, width, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    else:
        layers = [*conv_bn(3, width, 3), nn.ReLU()]
    cin = width
    for stage, blocks in enumerate(depths):
        for i in range(blocks):
            block = Block(cin, width << stage, 2 if stage and i == 0 else 1)
            layers.append(block)
            cin = block.cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def gpt(vocab: int, context: int, width: int, blocks: int, heads: int) -> Any:
    """A GPT-2-style decoder: ``(batch, tokens)`` of token ids in, ``(batch, tokens, vocab)`` logits out."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, width))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.positions = nn.Embedding(context, width)
            self.blocks = nn.Sequential(*(Block() for _ in range(blocks)))
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)

        def forward(self, idx: Any) -> Any:
            pos = torch.arange(idx.shape[1], device=idx.device)
            return self.head(self.ln(self.blocks(self.tokens(idx) + self.positions(pos))))

    return GPT()


def activation_floats(name: str, width: int = 0) -> int:
    """About how many floats autograd keeps per sample between the forward and the backward pass (an estimate
    for the memory check, not a measurement): every layer's output, a few copies of each."""
    m = spec(name)
    w = check_width(m, width)
    if m.family == "mlp":
        return 4 * (FEATURES + sum(m.hidden) + CLASSES)
    if m.family == "resnet":
        side = IMAGE_SHAPE[1]
        stages = sum(blocks * 6 * (w << s) * (side >> s) ** 2 for s, blocks in enumerate(m.depths))
        return 4 * w * side * side + stages
    t = m.context
    return m.depths[0] * t * (16 * w + 2 * m.heads * t) + 3 * t * m.vocab


def param_count(name: str, width: int = 0) -> int:
    """Parameters of model ``name`` (an mlp's counted, the others built on torch's meta device: nothing is
    allocated)."""
    m = spec(name)
    if m.family == "mlp":
        sizes = (FEATURES, *m.hidden, CLASSES)
        return sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    import torch

    with torch.device("meta"):
        net = build(name, width)
    return int(sum(p.numel() for p in net.parameters()))
