"""App server time: a full Configure rerun (form → validate → estimate → chart) and a Monitor refresh with 100k log
lines and 10k metric points in the store. Targets: ≤ 100 ms and ≤ 200 ms. Runs the pages with Streamlit's AppTest
(in-process, no browser); the baseline is an empty-script AppTest run measured the same way."""

import os
import sys
import tempfile
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))


def best(fn, n=5) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def main():
    with tempfile.TemporaryDirectory() as d:
        os.environ["GRPO_UI_HOME"], os.environ["GRPO_UI_DB"] = d, str(Path(d) / "db.sqlite")
        from grpo_ui.jobs.store import Store
        from grpo_ui.spec.presets import presets
        from grpo_ui.spec.yaml_io import spec_to_yaml

        empty = Path(d) / "empty.py"
        empty.write_text("import streamlit as st\nst.write('x')\n")
        base_at = AppTest.from_file(str(empty))
        baseline = best(lambda: base_at.run())

        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        at.button_group(key="section").set_value("batch").run()  # only the chosen section's fields are drawn
        box = at.text_input(key="f:train.num_generations")
        values = iter(["8", "16"] * 10)
        configure = best(lambda: box.set_value(next(values)).run())

        store = Store()
        spec = next(iter(presets().values()))
        store.create_job("big", spec.name, spec_to_yaml(spec), "succeeded")
        store.add_node("big", 0, "localhost", "trainer", 0, "node_0.sh", d)
        store.add_log_lines("big", 0, [f"[INFO:swift] line {i}" for i in range(100_000)], keep=100_000)
        for step in range(1, 1001):
            store.add_metrics("big", step, dict.fromkeys(("reward", "reward_std", "kl", "loss", "grad_norm", "completions/mean_length", "completions/clipped_ratio", "learning_rate", "seconds_per_step", "max_steps"), step * 0.001))
        mon = AppTest.from_file(str(ROOT / "views" / "monitor.py"), default_timeout=60)
        monitor = best(lambda: mon.run(), 3)
    print(f"empty Streamlit script (baseline): {baseline:.0f} ms")
    print(f"Configure rerun after a field change (validate + estimate + chart + findings): {configure:.0f} ms "
          f"(target ≤ 100 ms; {configure / baseline:.1f} × baseline)")
    print(f"Monitor page run with 100k log lines and 10k metric points: {monitor:.0f} ms (target ≤ 200 ms for the "
          f"fragment; this is the whole page)")


if __name__ == "__main__":
    main()
