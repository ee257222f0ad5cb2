"""The README's flag and settings tables are the ones the code generates."""

from pathlib import Path

from grpo_ui.commands.flags import markdown_table, settings_table

README = (Path(__file__).parent.parent / "README.md").read_text()


def between(marker: str) -> str:
    return README.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0].strip()


def test_readme_flag_table_is_current():
    assert between("flags") == markdown_table(), "run: python -m grpo_ui flags, and paste it into README.md"


def test_readme_settings_table_is_current():
    assert between("settings") == settings_table(), "run: python -m grpo_ui flags --settings, paste it into README.md"
