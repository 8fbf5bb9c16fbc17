"""The batching settings ``serve`` takes, checked before anything starts, wherever they come from:
``serve``'s keywords (``alpyka serve``'s options) and each model's own settings in a mapping
``{name: {"path": ..., "max_batch_size": ..., ...}}`` or ``{name: {"pipeline": ..., ...}}``.
A bad value is refused with an error naming the setting, where it was given, and what it takes:
Triton took ``max_batch_size=-3`` as a batch size of -3 and ``instances=0`` as one instance, and
failed a negative preferred size or queue delay with "failed to poll from model repository"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np

from portable import ArgumentError, ArgumentTypeError

#: a model's own settings, beside its ``path``: each one a keyword of serve's (the tensors too)
MODEL_KEYS = (
    "path",
    "inputs",
    "outputs",
    "max_batch_size",
    "dynamic_batching",
    "preferred_batch_sizes",
    "max_queue_delay_us",
    "instances",
    "device",
)
#: a pipeline's own settings (a pipeline does not batch: one request is one call)
PIPELINE_KEYS = ("pipeline", "instances", "device")
#: how serve's keywords are named on alpyka serve's command line
_OPTIONS = {
    "max_batch_size": "--max-batch-size",
    "preferred_batch_sizes": "--preferred-batch-size",
    "max_queue_delay_us": "--max-queue-delay-us",
    "instances": "--instances",
    "dynamic_batching": "--no-dynamic-batching",
}


def check_batching(
    max_batch_size: Any,
    preferred_batch_sizes: Sequence[Any] | None,
    max_queue_delay_us: Any,
    instances: Any,
    model: str | None = None,
    own: Sequence[str] = (),
) -> None:
    """Refuse batching settings Triton would take wrongly or fail on without naming them. ``model``
    (None: serve's keywords) names the model whose settings these are, ``own`` the settings it
    gave itself (the others are serve's keywords, which apply to it)."""

    def name(key: str, what: str | None = None) -> str:
        if model is not None and key in own:
            return f"model {model!r}'s {what or key} (its {key!r} in serve's models mapping)"
        return f"{what or key} ({_OPTIONS[key]})"

    if max_batch_size is not None:
        _whole(name("max_batch_size"), max_batch_size, 0, "0 (a model that does not batch) or more")
    _whole(name("instances"), instances, 1, "1 or more")
    _whole(name("max_queue_delay_us"), max_queue_delay_us, 0, "0 or more microseconds")
    if preferred_batch_sizes is not None and (
        isinstance(preferred_batch_sizes, (str, bytes)) or not isinstance(preferred_batch_sizes, Iterable)
    ):
        raise ArgumentTypeError(
            f"{name('preferred_batch_sizes')} is a list of ints, got {preferred_batch_sizes!r}: give e.g. [64, 128]"
        )
    limit, larger = "max_batch_size", "--max-batch-size"
    if model is not None and "max_batch_size" in own:
        limit, larger = f"model {model!r}'s max_batch_size", "'max_batch_size' in its settings"
    for size in list(preferred_batch_sizes or []):
        what = name("preferred_batch_sizes", "a preferred batch size")
        _whole(what, size, 1, "1 or more, at most max_batch_size")
        if max_batch_size is not None and size > max_batch_size:
            raise ArgumentError(
                f"{what} is at most {limit} ({max_batch_size}: give a larger {larger}, or leave it out for the "
                f"default), got {size}"
            )


def _whole(what: str, value: Any, least: int, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ArgumentTypeError(f"{what} is an int, {meaning}, got {value!r}")
    if value < least:
        raise ArgumentError(f"{what} is {meaning}, got {value!r}")
    return int(value)


def check_model_settings(models: Any, keywords: Mapping[str, Any]) -> None:
    """Check each model's own settings in serve's mapping ``models`` (nothing for a path, a module
    or a list), merged over serve's batching ``keywords`` as serve merges them: unknown keys,
    and batching values out of range or of the wrong type."""
    if not isinstance(models, Mapping):
        return
    for mname, per in models.items():
        if not isinstance(per, Mapping):
            continue
        known = PIPELINE_KEYS if "pipeline" in per else MODEL_KEYS
        unknown = sorted(str(k) for k in per if k not in known)
        if unknown:
            what = "a pipeline's" if "pipeline" in per else "a model's"
            raise ArgumentError(
                f"model {mname!r}: unknown setting(s) {', '.join(map(repr, unknown))} in serve's models mapping; "
                f"{what} settings are {', '.join(map(repr, known))}"
            )
        merged = {**keywords, **{k: v for k, v in per.items() if k in keywords}}
        own = [k for k in per if k in keywords]
        if "dynamic_batching" in per and not isinstance(per["dynamic_batching"], (bool, np.bool_)):
            raise ArgumentTypeError(
                f"model {mname!r}'s dynamic_batching (its 'dynamic_batching' in serve's models mapping) is True or "
                f"False, got {per['dynamic_batching']!r}"
            )
        preferred = merged.get("preferred_batch_sizes")
        dynamic = per.get("dynamic_batching", merged.get("dynamic_batching", True))
        batches = merged.get("max_batch_size") != 0 and bool(dynamic)
        if not batches and "preferred_batch_sizes" not in own:
            preferred = None  # serve's sizes apply to the models that batch (no batcher is made for this one)
        check_batching(
            merged.get("max_batch_size"),
            preferred,
            merged.get("max_queue_delay_us", 0),
            merged.get("instances", 1),
            model=str(mname),
            own=own,
        )
