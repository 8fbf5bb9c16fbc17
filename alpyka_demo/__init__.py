"""The demo application (`alpyka demo`): a fragment-merging GNN pipeline built on alpyka's public
API. It ships beside the library, not inside it: portable, backends, soa and inference never
import it (tests/portable/test_layering.py)."""
