"""The README's flag table is the one the code generates."""

from pathlib import Path

from grpo_ui.commands.flags import markdown_table


def test_readme_flag_table_is_current():
    text = (Path(__file__).parent.parent / "README.md").read_text()
    table = text.split("<!-- flags:start -->")[1].split("<!-- flags:end -->")[0].strip()
    assert table == markdown_table(), "run: python -m grpo_ui flags, and paste it into README.md"
