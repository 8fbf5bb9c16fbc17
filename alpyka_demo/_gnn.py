"""The edge classifier: a small message-passing GNN in plain PyTorch (TorchScript-able)."""

from __future__ import annotations

import torch
from torch import nn

from ._layouts import MAX_NODES

N_FEATURES = 7  # deta, dphi, dr, dt, log_e_src, log_e_dst, valid


class EdgeGNN(nn.Module):
    """Scores candidate edges ``[E, 7]`` between fragments ``index [E, 2]`` (int32) in [0, 1].

    Each round aggregates edge embeddings onto both end nodes (mean over valid edges) and
    updates each edge from its own embedding and its two nodes'. Slots whose ``valid`` feature
    is 0 are ignored and score 0. ``max_nodes`` bounds the fragment index.
    """

    def __init__(self, hidden: int = 32, rounds: int = 2, max_nodes: int = MAX_NODES) -> None:
        super().__init__()
        self.max_nodes = max_nodes
        self.hidden = hidden
        self.embed = nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.updates = nn.ModuleList(
            [nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)) for _ in range(rounds)]
        )
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        valid = features[:, 6:7]
        x = torch.cat([features[:, :4] * 10.0, features[:, 4:6], valid], dim=1)  # scale the small deltas
        src = index[:, 0].long()
        dst = index[:, 1].long()
        both = torch.cat([src, dst])
        e = self.embed(x) * valid
        count = torch.zeros(self.max_nodes, 1, dtype=e.dtype, device=e.device)
        count = count.index_add(0, both, torch.cat([valid, valid])).clamp(min=1.0)
        for update in self.updates:
            msg = torch.cat([e, e]) * torch.cat([valid, valid])
            h = torch.zeros(self.max_nodes, self.hidden, dtype=e.dtype, device=e.device)
            h = h.index_add(0, both, msg) / count
            e = (e + update(torch.cat([e, h[src], h[dst]], dim=1))) * valid
        return torch.sigmoid(self.head(e)) * valid
