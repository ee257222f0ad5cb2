"""The job: its fields, each declared once (model.py), the effective values ms-swift will use (resolve.py), the
command lines for a target ms-swift version (swift_cli.py), the form's text for each field (form.py) and the shipped
presets (presets.py)."""
