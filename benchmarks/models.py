"""Benchmark models with the input and output shapes of the SONIC seed models, in plain PyTorch.

- :class:`ParticleNetLike`: a jet tagger shaped like CMS's ParticleNet with secondary vertices
  (ParticleNet-Lite sized: two EdgeConv blocks, k = 7 nearest neighbours, 32 and 64 channels).
  Inputs per jet: points [N,2,100], features [N,20,100], mask [N,1,100], SV points [N,2,10],
  SV features [N,11,10], SV mask [N,1,10]; output: 8 class scores [N,8].
- :class:`DeepMETLike`: a per-particle weight regression shaped like DeepMET. Inputs: continuous
  candidate features [N,4500,8] and three categorical inputs [N,4500,1] (charge, pdgId class,
  fromPV class; embedded); output: the missing transverse momentum (px, py) [N,2], the sum of the
  candidates' (px, py) weighted by a learned non-negative per-candidate weight (px, py are the first
  two continuous features).

Both are traceable by TorchScript, ``torch.export`` (a dynamic batch axis) and the ONNX exporter.
Weights are random but deterministic: :func:`build` seeds the generator before constructing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# ----------------------------------------------------------------------------- ParticleNet-like

N_PARTICLES = 100
N_SV = 10
N_PF_FEATURES = 20
N_SV_FEATURES = 11
N_CLASSES = 8


def _knn(points: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [N,P,k] of the k nearest other points of each point (points: [N,D,P])."""
    inner = -2.0 * torch.matmul(points.transpose(1, 2), points)  # [N,P,P]
    sq = (points * points).sum(dim=1, keepdim=True)  # [N,1,P]
    dist = sq.transpose(1, 2) + inner + sq
    return dist.topk(k + 1, dim=-1, largest=False).indices[:, :, 1:]  # drop the point itself


def _neighbour_features(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Features of each point's neighbours: x [N,C,P], idx [N,P,k] -> [N,C,P,k]."""
    n, c, p = x.shape
    k = idx.shape[-1]
    base = torch.arange(n, device=x.device).view(-1, 1, 1) * p
    flat = (idx + base).reshape(-1)
    gathered = x.transpose(1, 2).reshape(-1, c)[flat]  # [N*P*k, C]
    return gathered.view(n, p, k, c).permute(0, 3, 1, 2)


class EdgeConv(nn.Module):
    """Dynamic-graph edge convolution: an MLP on (x_i, x_j - x_i) over the k nearest neighbours,
    averaged over the neighbours, plus a 1x1 shortcut."""

    def __init__(self, k: int, in_channels: int, channels: tuple[int, ...]) -> None:
        super().__init__()
        self.k = k
        layers: list[nn.Module] = []
        c_in = 2 * in_channels
        for c_out in channels:
            layers += [nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]
            c_in = c_out
        self.mlp = nn.Sequential(*layers)
        self.shortcut = nn.Sequential(nn.Conv1d(in_channels, channels[-1], 1, bias=False), nn.BatchNorm1d(channels[-1]))
        self.act = nn.ReLU()

    def forward(self, points: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        idx = _knn(points, self.k)
        neighbours = _neighbour_features(features, idx)  # [N,C,P,k]
        centre = features.unsqueeze(-1).expand_as(neighbours)
        edges = torch.cat([centre, neighbours - centre], dim=1)
        out = self.mlp(edges).mean(dim=-1)
        return self.act(out + self.shortcut(features))


class ParticleNetLike(nn.Module):
    """ParticleNet-shaped tagger: particle and SV features embedded to one width, joined into one
    point cloud of 110 points, two EdgeConv blocks, masked global average pooling, an MLP head."""

    def __init__(
        self,
        k: int = 7,
        width: int = 32,
        blocks: tuple[tuple[int, ...], ...] = ((32, 32, 32), (64, 64, 64)),
        fc: int = 128,
        n_classes: int = N_CLASSES,
    ) -> None:
        super().__init__()
        self.pf_embed = nn.Sequential(
            nn.BatchNorm1d(N_PF_FEATURES),
            nn.Conv1d(N_PF_FEATURES, width, 1, bias=False),
            nn.BatchNorm1d(width),
            nn.ReLU(),
        )
        self.sv_embed = nn.Sequential(
            nn.BatchNorm1d(N_SV_FEATURES),
            nn.Conv1d(N_SV_FEATURES, width, 1, bias=False),
            nn.BatchNorm1d(width),
            nn.ReLU(),
        )
        convs = []
        c_in = width
        for channels in blocks:
            convs.append(EdgeConv(k, c_in, channels))
            c_in = channels[-1]
        self.convs = nn.ModuleList(convs)
        self.fusion = nn.Sequential(
            nn.Conv1d(sum(b[-1] for b in blocks), 128, 1, bias=False), nn.BatchNorm1d(128), nn.ReLU()
        )
        self.head = nn.Sequential(nn.Linear(128, fc), nn.ReLU(), nn.Linear(fc, n_classes))

    def forward(
        self,
        pf_points: torch.Tensor,
        pf_features: torch.Tensor,
        pf_mask: torch.Tensor,
        sv_points: torch.Tensor,
        sv_features: torch.Tensor,
        sv_mask: torch.Tensor,
    ) -> torch.Tensor:
        mask = torch.cat([pf_mask, sv_mask], dim=2)  # [N,1,110]
        shift = (mask == 0).to(pf_points.dtype) * 1.0e9  # padded points: nobody's neighbour
        points = torch.cat([pf_points, sv_points], dim=2) + shift
        features = torch.cat([self.pf_embed(pf_features * pf_mask), self.sv_embed(sv_features * sv_mask)], dim=2)
        outs = []
        for i, conv in enumerate(self.convs):
            features = conv(points if i == 0 else features + shift, features) * mask
            outs.append(features)
        fused = self.fusion(torch.cat(outs, dim=1)) * mask
        pooled = fused.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        return self.head(pooled)


def particlenet_inputs(n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random jets: 30..100 particles and 0..10 SVs per jet, zero-padded, with their masks."""
    g = torch.Generator().manual_seed(seed)

    def masked(count: int, n_max: int) -> torch.Tensor:
        lengths = torch.randint(count, n_max + 1, (n, 1), generator=g)
        return (torch.arange(n_max).view(1, -1) < lengths).to(torch.float32).unsqueeze(1)

    pf_mask = masked(30, N_PARTICLES)
    sv_mask = masked(0, N_SV)
    pf_points = torch.randn(n, 2, N_PARTICLES, generator=g) * 0.4 * pf_mask
    pf_features = torch.randn(n, N_PF_FEATURES, N_PARTICLES, generator=g) * pf_mask
    sv_points = torch.randn(n, 2, N_SV, generator=g) * 0.4 * sv_mask
    sv_features = torch.randn(n, N_SV_FEATURES, N_SV, generator=g) * sv_mask
    return pf_points, pf_features, pf_mask, sv_points, sv_features, sv_mask


# ----------------------------------------------------------------------------- DeepMET-like

N_CANDIDATES = 4500
N_CONTINUOUS = 8
# categorical inputs: charge (-1, 0, 1 -> 0..2), pdgId class (0..7), fromPV (0..3)
CATEGORIES = (3, 8, 4)


class DeepMETLike(nn.Module):
    """DeepMET-shaped regression: embeddings of the categorical inputs joined to the continuous
    features, a per-candidate MLP giving a non-negative weight, and the weighted (px, py) sum."""

    def __init__(self, embed_dim: int = 8, hidden: tuple[int, ...] = (64, 32)) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, embed_dim) for n in CATEGORIES)
        self.norm = nn.BatchNorm1d(N_CONTINUOUS)
        c_in = N_CONTINUOUS + embed_dim * len(CATEGORIES)
        mlp: list[nn.Module] = []
        for c_out in hidden:
            mlp += [nn.Linear(c_in, c_out), nn.ReLU()]
            c_in = c_out
        mlp += [nn.Linear(c_in, 1), nn.Softplus()]
        self.mlp = nn.Sequential(*mlp)

    def forward(
        self, continuous: torch.Tensor, charge: torch.Tensor, pdg: torch.Tensor, from_pv: torch.Tensor
    ) -> torch.Tensor:
        x = self.norm(continuous.transpose(1, 2)).transpose(1, 2)  # [N,4500,8]
        embedded = [emb(cat.squeeze(-1)) for emb, cat in zip(self.embeddings, (charge, pdg, from_pv))]
        weights = self.mlp(torch.cat([x] + embedded, dim=-1))  # [N,4500,1]
        pxpy = continuous[:, :, 0:2]  # [N,4500,2]; padded candidates are all zero
        return (weights * pxpy).sum(dim=1)


def deepmet_inputs(n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random events: 1000..4500 candidates each, zero-padded to 4500."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1000, N_CANDIDATES + 1, (n, 1), generator=g)
    valid = (torch.arange(N_CANDIDATES).view(1, -1) < lengths).unsqueeze(-1)  # [N,4500,1]
    continuous = torch.randn(n, N_CANDIDATES, N_CONTINUOUS, generator=g) * valid
    cats = [torch.randint(0, c, (n, N_CANDIDATES, 1), generator=g) * valid for c in CATEGORIES]
    return (continuous, *cats)


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class BenchModel:
    """A benchmark model: how to build it, random inputs for a batch, input/output names."""

    name: str
    factory: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    bytes_per_event_hint: int  # rough peak activation memory per event (bytes), to skip huge batches
    #: inputs are [N, rows_per_event, C] per-candidate features: they can also come from a
    #: collection of one row per candidate (blocks with ``rows_per_item``); 0 when they cannot
    rows_per_event: int = 0

    def build(self, seed: int = 1234) -> nn.Module:
        """The model in eval mode with deterministic random weights (and BatchNorm statistics)."""
        torch.manual_seed(seed)
        model = self.factory()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.8, 1.2)
        return model.eval()


MODELS: dict[str, BenchModel] = {
    "particlenet": BenchModel(
        "particlenet",
        ParticleNetLike,
        particlenet_inputs,
        ("pf_points", "pf_features", "pf_mask", "sv_points", "sv_features", "sv_mask"),
        ("scores",),
        bytes_per_event_hint=110 * 7 * 128 * 4 * 3,
    ),  # measured eager peak ~1.1 MB per jet
    "deepmet": BenchModel(
        "deepmet",
        DeepMETLike,
        deepmet_inputs,
        ("continuous", "charge", "pdg", "from_pv"),
        ("met",),
        bytes_per_event_hint=N_CANDIDATES * 224 * 4,  # measured eager peak ~3.5 MB per event
        rows_per_event=N_CANDIDATES,
    ),
}
