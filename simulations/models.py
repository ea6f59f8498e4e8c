"""Per-layer tensor sizes and compute costs of real models, from torch module definitions.

The models are built with plain ``torch.nn`` (torchvision is not
installable beside torch 2.13) following their standard architectures (the
ResNet with the builder ``dlcp train`` uses, :func:`dlcp.models.resnet`), on the
``meta`` device, so nothing is allocated or downloaded. A forward pass on a meta
tensor gives every layer's output shape, from which its FLOPs follow. A
"layer" is a leaf module with parameters, in the order the forward pass uses
it (layer 0 first), which is the order DLCP's priorities follow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlcp.models import resnet


@dataclass(frozen=True)
class Layer:
    name: str
    params: int
    """Number of parameters (gradient elements)."""
    flops: float
    """Forward FLOPs for one sample."""


def _resnet50() -> Any:
    return resnet((3, 4, 6, 3), 64, 1000, bottleneck=True, imagenet_stem=True), (1, 3, 224, 224)


def _vgg16() -> Any:
    from torch import nn

    cfg: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers: list[nn.Module] = []
    cin = 3
    for v in cfg:
        if isinstance(v, int):
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
            cin = v
        else:
            layers.append(nn.MaxPool2d(2))
    layers += [
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096),
        nn.ReLU(),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Linear(4096, 1000),
    ]
    return nn.Sequential(*layers), (1, 3, 224, 224)


def _transformer() -> Any:
    """A BERT-base-sized encoder (12 layers, d=768, 12 heads, vocabulary 30522) on 128 tokens."""
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(30522, 768)
            self.pos = nn.Embedding(512, 768)
            layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
            self.head = nn.Linear(768, 30522)

        def forward(self, tokens: Any) -> Any:
            import torch

            pos = torch.arange(tokens.shape[1], device=tokens.device)
            return self.head(self.encoder(self.embed(tokens) + self.pos(pos)))

    return Encoder(), (1, 128)


MODELS: dict[str, Callable[[], Any]] = {"resnet50": _resnet50, "vgg16": _vgg16, "transformer": _transformer}


@functools.cache
def layers(model: str) -> tuple[Layer, ...]:
    """The model's layers in forward order."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r} (known: {', '.join(sorted(MODELS))})")
    import torch
    from torch import nn

    with torch.device("meta"):
        net, shape = MODELS[model]()
    net.eval()
    found: list[Layer] = []
    seen: set[int] = set()

    def hook(mod: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        if id(mod) in seen:
            return
        seen.add(id(mod))
        params = sum(p.numel() for p in mod.parameters(recurse=False))
        if params == 0:
            return
        flops = 0.0
        x = args[0] if args else None
        if isinstance(mod, nn.Conv2d):
            k = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
            flops = 2.0 * out.numel() * k
        elif isinstance(mod, nn.Linear):
            flops = 2.0 * out.numel() * mod.in_features
        elif x is not None and hasattr(x, "numel"):
            flops = 2.0 * float(x.numel())  # norms, embeddings: a few operations per element
        found.append(Layer(name, params, flops) if (name := names.get(id(mod), "")) else Layer("?", params, flops))

    names = {id(m): n for n, m in net.named_modules()}
    handles = [m.register_forward_hook(hook) for m in net.modules() if not list(m.children())]
    # Attention modules own parameters (in_proj) but have children (out_proj): hook them too.
    handles += [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.MultiheadAttention)]
    inp = (
        torch.zeros(shape, dtype=torch.long, device="meta")
        if model == "transformer"
        else torch.zeros(shape, device="meta")
    )
    with torch.no_grad():
        net(inp)
    for h in handles:
        h.remove()
    return tuple(found)
