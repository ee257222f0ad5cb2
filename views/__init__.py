"""The app's pages and their drawing helpers (Streamlit). They use the library only through its one door,
grpo_ui.api, and grpo_ui.core's types (import-linter checks it)."""
