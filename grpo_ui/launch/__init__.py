"""From an assessed job to what runs: the launch plan (plan.py) and the node scripts rendered from templates/
(render.py)."""
