"""The foundation every layer uses: findings (the one shape of every check), user errors, the one shell-quoting
helper and owner-only files. Imports nothing of grpo-ui."""
