"""The main job: the fragment-merging GNN pipeline (what `alpyka demo` runs).

Run: python examples/pipeline.py [--backend B] [--events N] [--streams S] [--remote auto]
"""

from alpyka_demo.pipeline import main

if __name__ == "__main__":
    raise SystemExit(main())
