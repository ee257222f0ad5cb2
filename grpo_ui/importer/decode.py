"""Script bytes → text: size and binary checks before anything is parsed, UTF-8 (with or without BOM), GBK/GB18030
(common for scripts written on Chinese-locale machines), CRLF line ends."""

from __future__ import annotations

from grpo_ui.core.findings import Finding, finding
from grpo_ui.spec.errors import SpecError

MAX_BYTES = 1 << 20  # a launch script is a few KiB; anything this large is a log, a checkpoint or the wrong file


def _refuse(name: str, why: str) -> SpecError:
    return SpecError([("scripts", f"{name}: {why}")], name)


def decode(name: str, data: bytes | str) -> tuple[str, list[Finding]]:
    """The text bash would read, with LF line ends; SpecError naming the file when it is not a script."""
    findings: list[Finding] = []
    if isinstance(data, str):
        raw = data.encode("utf-8", "surrogatepass")
    else:
        raw = data
    if len(raw) > MAX_BYTES:
        raise _refuse(name, f"{len(raw):,} bytes is too large for a launch script (limit {MAX_BYTES:,}); "
                            "import the script that runs swift, not a log or a data file")
    if b"\x00" in raw:
        raise _refuse(name, "is a binary file (it contains NUL bytes), not a shell script or YAML")
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        try:
            text = raw.decode("gb18030")
        except UnicodeDecodeError:
            raise _refuse(name, "is neither UTF-8 nor GBK/GB18030 text; save it as UTF-8 and import it again") from None
        findings.append(finding("IMPORT-ENCODING", "info", "spec", f"{name} is not UTF-8; it was read as GBK/GB18030.",
                                "Nothing to do; save it as UTF-8 if other tools show garbled text."))
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
        findings.append(finding("IMPORT-CRLF", "info", "spec", f"{name} has Windows (CRLF) line ends; they were read "
                                "as LF. Run as is, bash would keep a stray carriage return at the end of every line's "
                                "last word.", "Convert the script to LF line ends (dos2unix) before running it."))
    return text, findings
