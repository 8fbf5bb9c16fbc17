"""The demo application (`alpyka demo`): a fragment-merging GNN pipeline built on alpyka's public
API. It ships beside the library, not inside it: portable, backends, soa and inference never
import it (tests/portable/test_layering.py)."""

# portable first, before any module of the package imports numpy or torch: in ``python -m
# alpyka_demo.train`` (or ``.pipeline``) its import guards the command's start against a Ctrl-C
# (portable/_command_start.py), and the modules here import it anyway
import portable  # noqa: F401
