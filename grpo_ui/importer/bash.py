"""Shell text → the swift invocations it runs, with their words expanded as bash would, without running anything.

The grammar is tree-sitter-bash (PyPI ``tree-sitter`` + ``tree-sitter-bash`` wheels, maintained with the tree-sitter
project). Chosen over bashlex, which raises NotImplementedError on ``$((…))`` arithmetic and has had no release since
2023; tree-sitter-bash parsed every construct of the import corpus: comments only at a word start (``#`` inside
``NuminaMath-TIR#1000`` is part of the word), quotes, escapes, continuations, multi-line quoted values, arrays,
``${VAR:-default}``, ``$((…))``, functions, pipelines and redirections.

Static expansion follows bash for what a script can decide on its own: assignments and ``export`` earlier in the
script, ``VAR=value`` prefixes, ``$VAR``/``${VAR}``/``${VAR:-default}`` (``-``, ``=``, ``+`` forms), arrays,
integer ``$((…))``, field splitting of unquoted expansions. What only the caller's shell knows (a variable the script
never sets, ``$(…)``, ``~``, ``$1``) stays as its source text on a Word marked unresolved.
"""

from __future__ import annotations

import ast
import codecs
import operator
import re
from dataclasses import dataclass
from functools import cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

WRAPPERS = {"nohup", "setsid", "exec", "time", "command", "builtin"}
LAUNCHER_FLAGS = {"nproc_per_node": "NPROC_PER_NODE", "nnodes": "NNODES", "node_rank": "NODE_RANK",
                  "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
FLOW = {"if_statement", "for_statement", "c_style_for_statement", "while_statement", "case_statement"}
SEQUENCE = {"program", "list", "pipeline", "redirected_statement", "subshell", "compound_statement"}


@dataclass
class Word:
    """One argument after expansion. ``unresolved`` holds the shell text when the value depends on the caller."""

    text: str
    line: int
    unresolved: str | None = None


@dataclass
class Invocation:
    """One ``swift rlhf`` / ``swift rollout`` / ``megatron rlhf`` the script runs (or torchrun/python on
    ``…/swift/cli/rlhf.py`` or ``…/swift/cli/_megatron/rlhf.py``)."""

    kind: str                 # 'rlhf' or 'rollout'
    args: list[Word]          # what follows the sub-command (or the rlhf.py path)
    env: dict[str, Word]      # the environment it gets from the script: exported variables and VAR=value prefixes
    line: int
    source: str
    program: str = "swift"    # the launcher: swift, or megatron (megatron rlhf)


@dataclass
class Notice:
    """Something the walk could not follow (a finding for the importer to phrase)."""

    kind: str
    line: int
    text: str
    flag: str | None = None     # 'syntax': the flag the broken text follows (its value is what bash cannot read)
    lost: tuple[str, ...] = ()  # 'syntax', 'quote': the flags after it, which bash never passes


@cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "surrogateescape")


# Arithmetic: integers and + - * / % ** << >> & | ^ and unary minus, with bash's truncating division.
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: lambda a, b: int(
    a - b * int(a / b)), ast.Div: lambda a, b: int(a / b), ast.FloorDiv: lambda a, b: int(a / b), ast.Pow: pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor}


def _arith(tree: ast.AST) -> int:
    if isinstance(tree, ast.Expression):
        return _arith(tree.body)
    if isinstance(tree, ast.Constant) and isinstance(tree.value, int):
        return tree.value
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, (ast.USub, ast.UAdd)):
        return -_arith(tree.operand) if isinstance(tree.op, ast.USub) else _arith(tree.operand)
    if isinstance(tree, ast.BinOp) and type(tree.op) in _BINARY:
        return _BINARY[type(tree.op)](_arith(tree.left), _arith(tree.right))
    raise ValueError("not simple integer arithmetic")


class _Fields:
    """Builds the words of one shell word: quoted text joins, unquoted expansion results split on blanks."""

    def __init__(self, line: int):
        self.line = line
        self.words: list[Word] = []
        self.current: list[str] | None = None

    def add(self, text: str, split: bool = False) -> None:
        if not split:
            self.current = (self.current or []) + [text]
            return
        parts = re.split(r"[ \t\n]+", text)
        for i, part in enumerate(parts):
            if i:
                self.close()
            if part:
                self.current = (self.current or []) + [part]

    def close(self) -> None:
        if self.current is not None:
            self.words.append(Word("".join(self.current), self.line))
        self.current = None


class Shell:
    """The variables a script has set so far, and which of them it exported."""

    def __init__(self, source: str, stop: int):
        self.source = source
        self.stop = stop  # where bash stops reading (a syntax error): nothing from there on runs
        self.vars: dict[str, list[Word]] = {}   # an array is several words; a scalar one
        self.exported: set[str] = set()
        self.functions: dict[str, Node] = {}
        self.invocations: list[Invocation] = []
        self.notices: list[Notice] = []

    # ----- words --------------------------------------------------------------------------------------------------

    def words(self, node: Node) -> list[Word]:
        """The words one argument node expands to (0, 1 or several)."""
        fields = _Fields(_line(node))
        try:
            self._expand(node, fields, split=True)
        except _Unresolved:
            return [Word(_text(node), _line(node), _text(node))]
        fields.close()
        return fields.words

    def word(self, node: Node) -> Word:
        """One word (an assignment's value, a prefix): no field splitting, as bash does there."""
        fields = _Fields(_line(node))
        try:
            self._expand(node, fields, split=False)
        except _Unresolved:
            return Word(_text(node), _line(node), _text(node))
        return Word("".join(fields.current or []), _line(node))

    def _expand(self, node: Node, out: _Fields, split: bool) -> None:
        """Append what node expands to; ``split``: unquoted context, where expansion results split on blanks."""
        kind = node.type
        if kind in ("word", "number", "variable_name"):  # a name in ${X:-default}'s default is plain text
            text = _text(node)
            if text.startswith("~"):
                raise _Unresolved  # the caller's home directory
            out.add(re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.S))
        elif kind == "raw_string":
            out.add(_text(node)[1:-1])
        elif kind == "ansi_c_string":
            out.add(codecs.decode(_text(node)[2:-1].encode("latin-1", "backslashreplace"), "unicode_escape"))
        elif kind == "string":
            self._string(node, out)
        elif kind == "concatenation":
            for child in node.children:
                self._expand(child, out, split)
        elif kind in ("simple_expansion", "expansion"):
            self._parameter(node, out, split)
        elif kind == "arithmetic_expansion":
            out.add(str(self._arithmetic(node)))
        else:  # $(…), `…`, <(…), globs the grammar marks specially: only the caller's shell knows
            raise _Unresolved

    def _string(self, node: Node, out: _Fields) -> None:
        """A double-quoted string: the text between its expansions with \\ \" \\$ \\` and \\newline unescaped."""
        start, end = node.start_byte + 1, node.end_byte - 1
        source = node.text
        pos = start
        out.add("")  # "" is a word even when empty
        for child in node.children:
            if child.type in ("simple_expansion", "expansion", "arithmetic_expansion", "command_substitution"):
                out.add(self._dq(source[pos - node.start_byte:child.start_byte - node.start_byte]))
                self._expand(child, out, split=False)
                pos = child.end_byte
        out.add(self._dq(source[pos - node.start_byte:end - node.start_byte]))

    @staticmethod
    def _dq(raw: bytes) -> str:
        text = raw.decode("utf-8", "surrogateescape")
        return re.sub(r"\\([\\\"$`\n])", lambda m: "" if m[1] == "\n" else m[1], text)

    def _parameter(self, node: Node, out: _Fields, split: bool) -> None:
        """$VAR, ${VAR}, ${VAR:-x}, ${VAR-x}, ${VAR:=x}, ${VAR:+x}, ${ARR[@]}, ${ARR[*]}, ${ARR[i]}, ${#VAR}."""
        named = [c for c in node.children if c.is_named]
        ops = [c.type for c in node.children if not c.is_named and c.type not in ("$", "${", "}")]
        if not named or named[0].type not in ("variable_name", "subscript"):
            raise _Unresolved  # $1, $@, $$, ${!x} …: positional and special parameters belong to the caller
        target = named[0]
        index = None
        if target.type == "subscript":
            index = _text(target.child_by_field_name("index") or target.named_children[-1])
            target = target.named_children[0]
        name = _text(target)
        values = self.vars.get(name)
        if index is not None and values is not None and index not in ("@", "*"):
            try:
                values = [values[int(index)]]
            except (ValueError, IndexError):
                values = []
        if ops == ["#"]:
            if values is None:
                raise _Unresolved
            out.add(str(len(values) if index in ("@", "*") else len(values[0].text) if values else 0))
            return
        operand = named[1] if len(named) > 1 else None
        if ops:
            op = ops[-1]
            empty = values is None or (op.startswith(":") and all(not w.text for w in values))
            if op in (":-", "-", ":=", "="):
                if empty:
                    alt = self.word(operand) if operand else Word("", _line(node))
                    if alt.unresolved:
                        raise _Unresolved
                    if op in (":=", "="):
                        self.vars[name] = [alt]
                    values = [alt]
            elif op in (":+", "+"):
                values = [] if empty else [self.word(operand) if operand else Word("", _line(node))]
            else:
                raise _Unresolved  # pattern removal and the like: left to bash
        if values is None:
            raise _Unresolved  # never set in the script: the caller's environment decides
        if any(w.unresolved for w in values):
            raise _Unresolved
        if index == "@" and not split:
            for i, w in enumerate(values):
                if i:
                    out.close()
                out.add(w.text)
            return
        out.add(" ".join(w.text for w in values), split=split)

    def _arithmetic(self, node: Node) -> int:
        inner = _text(node)[3:-2]

        def value(m: re.Match) -> str:
            words = self.vars.get(m[1] or m[2] or m[3])
            if words is None or len(words) != 1 or words[0].unresolved:
                raise _Unresolved
            return words[0].text.strip() or "0"

        expr = re.sub(r"\$\{(\w+)\}|\$(\w+)|\b([A-Za-z_]\w*)\b", value, inner)
        try:
            return _arith(ast.parse(expr.replace("/", "//").strip(), mode="eval"))
        except (SyntaxError, ValueError, ZeroDivisionError):
            raise _Unresolved from None

    # ----- statements ---------------------------------------------------------------------------------------------

    def run(self, node: Node) -> None:
        kind = node.type
        if node.start_byte >= self.stop:
            return
        if kind in SEQUENCE:
            for child in node.named_children:
                self.run(child)
        elif kind == "variable_assignment":
            self._assign(node)
        elif kind == "variable_assignments":
            for child in node.named_children:
                if child.type == "variable_assignment":  # a broken script can put error nodes among them
                    self._assign(child)
        elif kind == "declaration_command":
            self._declare(node)
        elif kind == "unset_command":
            for child in node.named_children:
                self.vars.pop(_text(child), None)
                self.exported.discard(_text(child))
        elif kind == "function_definition":
            name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
            if name is not None:
                self.functions[_text(name)] = body
        elif kind == "command":
            self._command(node)
        elif kind in FLOW and re.search(r"\b(swift|megatron)\b|swift/cli/", _text(node)):
            self.notices.append(Notice("flow", _line(node), _text(node).split("\n", 1)[0][:80]))

    def _assign(self, node: Node, export: bool = False) -> None:
        if node.child_by_field_name("name") is None:  # tree-sitter's recovery from a syntax error
            return
        name = _text(node.child_by_field_name("name"))
        value = node.child_by_field_name("value")
        append = any(c.type == "+=" for c in node.children)
        if value is None:
            words = [Word("", _line(node))]
        elif value.type == "array":
            words = [w for child in value.named_children for w in self.words(child)]
        else:
            words = [self.word(value)]
        if append and name in self.vars:
            old = self.vars[name]
            words = old + words if value is not None and value.type == "array" else [
                Word(old[0].text + words[0].text, words[0].line, old[0].unresolved or words[0].unresolved)]
        self.vars[name] = words
        if export:
            self.exported.add(name)

    def _declare(self, node: Node) -> None:
        keyword = node.children[0].type
        options = "".join(_text(c) for c in node.named_children if c.type == "word" and _text(c).startswith("-"))
        export = keyword == "export" or "x" in options
        for child in node.named_children:
            if child.type == "variable_assignment":
                self._assign(child, export)
            elif child.type == "variable_name" and export:
                self.exported.add(_text(child))

    def _command(self, node: Node) -> None:
        prefix: dict[str, Word] = {}
        words: list[Word] = []
        for child in node.named_children:
            if child.end_byte > self.stop:  # the syntax error is in it, or it comes after
                break
            if child.type == "variable_assignment" and not words:
                prefix[_text(child.child_by_field_name("name"))] = self.word(child.child_by_field_name("value")) \
                    if child.child_by_field_name("value") else Word("", _line(child))
            elif child.type == "command_name":
                words += self.words(child.named_children[0])
            elif child.type not in ("file_redirect", "herestring_redirect", "comment"):
                words += self.words(child)
        while words and words[0].text in WRAPPERS | {"env"}:
            wrapper = words.pop(0).text
            while wrapper == "env" and words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0].text, re.S):
                key, _, value = words.pop(0).text.partition("=")
                prefix[key] = Word(value, node.start_point[0] + 1)
        if not words:
            for key, value in prefix.items():  # bare assignments are handled by _assign; nothing else to do
                self.vars[key] = [value]
            return
        name = words[0].text
        if name in self.functions:
            self.run(self.functions[name])
            return
        found = _swift_call(words)
        if found:
            kind, args, launcher, program = found
            env = {k: self.vars[k][0] for k in sorted(self.exported) if self.vars.get(k)}
            env.update(launcher)
            env.update(prefix)
            self.invocations.append(Invocation(kind, args, env, _line(node), self.source, program))
        elif name in ("source", ".") and len(words) == 2 and words[1].text.endswith("/bin/activate"):
            self.notices.append(Notice("venv", _line(node), words[1].text.removesuffix("/bin/activate")))
        elif name in ("source", "."):
            self.notices.append(Notice("source", _line(node), " ".join(w.text for w in words)[:80]))
        elif name.startswith("--") and self.invocations:  # flags cut off from swift by a comment or a lost "\"
            self.notices.append(Notice("orphan", _line(node), " ".join(w.text for w in words)[:80]))


class _Unresolved(Exception):
    """An expansion only the caller's shell can do."""


def _swift_call(words: list[Word]) -> tuple[str, list[Word], dict[str, Word], str] | None:
    """(kind, arguments, torchrun settings as env, launcher) when the command runs swift rlhf/rollout or megatron
    rlhf, else None."""
    head = words[0].text.rsplit("/", 1)[-1]
    if head == "swift" and len(words) > 1 and words[1].text in ("rlhf", "rollout"):
        return words[1].text, words[2:], {}, "swift"
    if head == "megatron" and len(words) > 1 and words[1].text == "rlhf":
        return "rlhf", words[2:], {}, "megatron"
    for i, w in enumerate(words):
        m = re.search(r"(?:^|/)swift/cli/(_megatron/)?(rlhf|rollout)\.py$", w.text)
        if m:
            return m[2], words[i + 1:], _launcher_env(words[1:i]), "megatron" if m[1] else "swift"
    return None


def _launcher_env(words: list[Word]) -> dict[str, Word]:
    """torchrun / python -m torch.distributed.run options → the env variables swift would have turned into them."""
    env: dict[str, Word] = {}
    i = 0
    while i < len(words):
        name, eq, value = words[i].text.lstrip("-").replace("-", "_").partition("=")
        if words[i].text.startswith("--") and name in LAUNCHER_FLAGS:
            if eq:
                env[LAUNCHER_FLAGS[name]] = Word(value, words[i].line, words[i].unresolved)
            elif i + 1 < len(words):
                env[LAUNCHER_FLAGS[name]] = words[i + 1]
                i += 1
        i += 1
    return env


def parse(text: str, source: str) -> tuple[list[Invocation], list[Notice]]:
    """Every swift invocation in the script, in the order bash would run them. Bash refuses a command it cannot
    parse and stops there: what comes from the first syntax error on is not read (a 'syntax' or 'quote' notice)."""
    data = text.encode("utf-8", "surrogateescape")
    tree = _parser().parse(data)
    bad = _first_error(tree.root_node) if tree.root_node.has_error else None
    if bad is not None and bad.is_missing and bad.parent is not None:
        bad = bad.parent  # a closing token the file lacks (a quote, `)`, `fi`): what it would close is the error
    shell = Shell(source, bad.start_byte if bad is not None else len(data))
    shell.run(tree.root_node)
    if bad is not None:
        shell.notices.append(_syntax_notice(data, bad))
    return shell.invocations, shell.notices


def _syntax_notice(data: bytes, bad: Node) -> Notice:
    """Where bash stops reading: the line, the flag the broken text follows on the same command, the flags after it
    (never read), and for a quote that never closes (bash: "unexpected EOF while looking for matching") the quote."""
    before = data[:bad.start_byte].decode("utf-8", "surrogateescape").replace("\\\n", " ")
    flags = re.findall(_FLAG, before.rsplit("\n", 1)[-1])
    after = data[bad.start_byte:].decode("utf-8", "surrogateescape")
    lost = tuple(dict.fromkeys(re.findall(_FLAG, after)))
    broken = _text(bad)
    quote = re.match(r"\$?['\"`]", broken)
    if quote and bad.end_byte >= len(data.rstrip()):
        return Notice("quote", _line(bad), quote[0][-1], flags[-1] if flags else None, lost)
    return Notice("syntax", _line(bad), broken.split("\n", 1)[0][:80], flags[-1] if flags else None, lost)


_FLAG = r"(?:^|\s)--([A-Za-z_][\w-]*)"


def _first_error(node: Node) -> Node:
    for child in node.children:
        if child.type == "ERROR" or child.is_missing:
            return child
        if child.has_error:
            return _first_error(child)
    return node
