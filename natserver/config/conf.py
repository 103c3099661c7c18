"""Parser for nats-server's configuration file format.

The format (nats-server's ``conf`` package) is a relaxed mix of JSON and
nginx-style configuration. A document is a list of entries:

    entry     := key [ "=" | ":" ] value        -- the separator may be plain whitespace
               | "include" file-name            -- merge another file's entries here
    key       := bare-key | "double quoted" | 'single quoted'   (no escapes in keys)
    value     := map | array | string | number | boolean | datetime | $variable
    map       := "{" entry* "}"                 -- "authorization { ... }": no separator needed
    array     := "[" value ( ("," | newline) value )* [","] "]"

Entries (and map members) end at a new line, ";" or ","; "#" and "//" start
comments that run to the end of the line. The whole document may also be
wrapped in braces, JSON style.

Values:

* ``"double quoted"`` strings understand ``\\t \\n \\r \\" \\\\ \\xHH`` (plus
  ``\\uHHHH``, an extension); ``'single quoted'`` strings are raw; both may
  span lines. A block string is ``(`` ... up to a ``)`` alone at the start of
  a line.
* Anything else is a bare word, ending at whitespace, a new line, ``;``,
  ``,``, ``]`` or ``}``. Bare words are classified: integers (``-1``,
  ``4222``), integers with a size suffix (``1k`` = 1000, ``1kb`` = ``1ki`` =
  ``1kib`` = 1024; likewise m, g, t, p, e), floats (``0.5``), ISO-8601 Zulu
  datetimes, booleans (``true yes on false no off``, any case), ``$name``
  variable references, and otherwise plain strings (``127.0.0.1:4222``,
  ``10s``, ``nats://host:4222``). Durations therefore stay strings, except
  that a bare ``2m`` is the *size* 2000000, exactly as in nats-server: write
  ``"2m"`` for two minutes.
* ``$name`` is looked up in the maps being built, innermost first, then in the
  environment, whose value is parsed as a configuration value (so ``PORT=4222``
  gives the integer 4222). ``$2a$...`` (a bcrypt hash) is not a reference.

Everything is returned as plain Python values: dict, list, str, int, float,
bool and timezone-aware ``datetime``. Errors raise :class:`ConfigError` with a
1-based line and column.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone

from ..protocol.gotext import GO_JSON_ESCAPES, parse_duration

# ConfigError lives in options.py, which the command line imports without this parser when
# there is no config file; it is still importable from here.
from .options import ConfigError

__all__ = ["ConfigError", "config_digest", "parse", "parse_file", "parse_duration", "to_int"]


class _ReferenceCycleError(ConfigError):
    """An environment variable that (indirectly) refers to itself.

    Kept apart from other errors so that it is reported once, at the
    reference in the configuration file, rather than wrapped at every level.
    """


_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _size_multipliers() -> dict[str, int]:
    # As nats-server's conf/parse.go: a bare letter is a decimal multiple
    # (1k = 1000) and the letter followed by "b", "i" or "ib" a binary one
    # (1kb = 1ki = 1kib = 1024).
    multipliers = {}
    for power, letter in enumerate("kmgtpe", start=1):
        multipliers[letter] = 1000**power
        for tail in ("b", "i", "ib"):
            multipliers[letter + tail] = 1024**power
    return multipliers


_SIZE_MULTIPLIERS = _size_multipliers()

_SIZED_INT_RE = re.compile(r"(-?[0-9]+)([kmgtpe](?:b|i|ib)?)?", re.IGNORECASE)
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+")
_DATETIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
# nats-server reads digits followed by "-" as the start of a datetime and
# rejects anything that is not then a full Zulu datetime.
_DATETIME_START_RE = re.compile(r"[0-9]+-")
# nats-server passes "$2a$..." through as a literal so that bcrypt hashes need
# no quotes; we accept every prefix the server itself recognises as bcrypt.
_BCRYPT_REFERENCE_RE = re.compile(r"2[abxy]\$")
_BOOLEANS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}

_SPACE_RE = re.compile(r"\s*")
_BLANKS_RE = re.compile(r"[ \t]*")
_COMMENT_BODY_RE = re.compile(r"[^\r\n]*")
_BARE_KEY_RE = re.compile(r"[^\s=:{\[]+")
_INCLUDE_BARE_RE = re.compile(r"[^\s;}]+")
# Runs of ordinary characters, up to the next terminator or backslash.
_BARE_RUN_RE = re.compile(r"[^ \t\r\n;,\]}\\]+")
_DOUBLE_QUOTED_RUN_RE = re.compile(r'[^"\\]+')
_BLOCK_STRING_END_RE = re.compile(r"\n\)(?=\r?\n|\Z)")
_HEX2_RE = re.compile(r"[0-9a-fA-F]{2}")
_HEX4_RE = re.compile(r"[0-9a-fA-F]{4}")

_NEWLINES = frozenset("\r\n")
_KEY_SEPARATORS = frozenset("=:")
_QUOTES = frozenset("\"'")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_ALLOWED_ESCAPES = "\\t, \\n, \\r, \\\", \\\\, \\xHH and \\uHHHH"

# Environment values are parsed as the value of this key in a one-line document.
_ENV_VALUE_KEY = "pk"


class _Parser:
    """Recursive-descent parser over one text, building the value as it reads."""

    def __init__(
        self,
        text: str,
        *,
        path: str | None,
        env: Mapping[str, str],
        include_chain: tuple[str, ...],
        env_chain: tuple[str, ...],
    ) -> None:
        self.text = text
        self.path = path
        self.env = env
        # Real paths of the files being parsed, outermost first (include cycles).
        self.include_chain = include_chain
        # Names of the environment variables being expanded, outermost first
        # (reference cycles).
        self.env_chain = env_chain
        self.pos = 0
        # The maps under construction, outermost first: where $variables are
        # looked up before the environment.
        self.scopes: list[dict] = []

    # -- positions and errors ------------------------------------------------

    def _location(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        line_start = self.text.rfind("\n", 0, pos) + 1
        return line, pos - line_start + 1

    def _error(self, reason: str, pos: int | None = None, cls: type = ConfigError) -> ConfigError:
        line, column = self._location(self.pos if pos is None else pos)
        return cls(reason, path=self.path, line=line, column=column)

    def _where(self, pos: int) -> str:
        line, column = self._location(pos)
        return f"{self.path if self.path is not None else 'config'}:{line}:{column}"

    # -- low-level scanning --------------------------------------------------

    def _peek(self) -> str:
        """The next character, or "" at the end of the text."""
        return self.text[self.pos : self.pos + 1]

    def _skip_run(self, pattern: re.Pattern[str]) -> None:
        """Move past the run of ``pattern`` (one that also matches the empty string) here."""
        match = pattern.match(self.text, self.pos)
        assert match is not None  # an empty run matches
        self.pos = match.end()

    def _skip_blanks(self) -> None:
        self._skip_run(_BLANKS_RE)

    def _skip_space(self) -> None:
        self._skip_run(_SPACE_RE)

    def _at_comment(self) -> bool:
        return self.text.startswith("#", self.pos) or self.text.startswith("//", self.pos)

    def _skip_comment(self) -> None:
        self._skip_run(_COMMENT_BODY_RE)

    def _skip_space_and_comments(self) -> None:
        while True:
            self._skip_space()
            if not self._at_comment():
                return
            self._skip_comment()

    def _decode(self, raw: bytearray, start: int) -> str:
        # \xHH escapes add raw bytes, as they would to a Go string; the result
        # must still be UTF-8 to become a Python str.
        try:
            return raw.decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError:
            raise self._error("the \\x escapes in this string do not form valid UTF-8", start) from None

    # -- entries -------------------------------------------------------------

    def parse_document(self) -> dict:
        root: dict = {}
        self.scopes.append(root)
        self._parse_entries(root, opened_at=None, top_level=True)
        return root

    def _parse_entries(self, target: dict, *, opened_at: int | None, top_level: bool) -> None:
        """Read entries into ``target`` up to the "}" closing the "{" at
        ``opened_at``, or to the end of the text when ``opened_at`` is None."""
        while True:
            self._skip_space_and_comments()
            char = self._peek()
            if char == "":
                if opened_at is None:
                    return
                raise self._error("'{' is never closed: expected '}' before the end of the file", opened_at)
            if char == "}":
                self.pos += 1
                if opened_at is not None:
                    return
                # nats-server ignores a stray "}" at the top level (JSON-like
                # files sometimes end with one), so we do too.
                continue
            if char == "{" and top_level:
                # Braces around top-level entries (a JSON-style document) add
                # no level: their entries belong to the top-level map.
                brace = self.pos
                self.pos += 1
                self._parse_entries(target, opened_at=brace, top_level=True)
                continue
            key = self._parse_entry(target, top_level=top_level)
            self._expect_end_of_entry(key)

    def _parse_entry(self, target: dict, *, top_level: bool) -> str:
        key_pos = self.pos
        key, quoted = self._parse_key()
        if not quoted and key.lower() == "include" and self._peek().isspace():
            self._parse_include(target, key_pos)
            return key
        # A value may follow its key on a later line, but (at the top level)
        # not on a later line than its "=" or ":".
        self._skip_space()
        if self._peek() in _KEY_SEPARATORS:
            self.pos += 1
            if top_level:
                self._skip_blanks()
                if self._peek() in _NEWLINES:
                    raise self._error(f"expected a value for {key!r}, but found a new line")
            else:
                self._skip_space()
        if self._peek() == "":
            raise self._error(f"expected a value for {key!r}, but reached the end of the file", key_pos)
        target[key] = self._parse_value()
        return key

    def _parse_key(self) -> tuple[str, bool]:
        """Return the key and whether it was quoted (a quoted "include" is a key)."""
        start = self.pos
        char = self._peek()
        if char in _QUOTES:
            end = self.text.find(char, start + 1)
            if end < 0:
                raise self._error(f"unterminated quoted key: missing closing {char}", start)
            self.pos = end + 1
            return self.text[start + 1 : end], True
        if char in _KEY_SEPARATORS:
            raise self._error(f"unexpected key separator {char!r}: expected a key")
        match = _BARE_KEY_RE.match(self.text, start)
        if match is None or char == "]":
            raise self._error(f"expected a key, but found {char!r}")
        self.pos = match.end()
        return match.group(), False

    def _expect_end_of_entry(self, key: str) -> None:
        self._skip_blanks()
        char = self._peek()
        if char == "" or char == "}":
            return  # _parse_entries deals with both
        if char in _NEWLINES or char == ";" or char == ",":
            self.pos += 1
            return
        if self._at_comment():
            self._skip_comment()
            return
        raise self._error(
            f"expected a new line, ';', ',' or '}}' after the value of {key!r}, but found {char!r}"
        )

    # -- include -------------------------------------------------------------

    def _parse_include(self, target: dict, keyword_pos: int) -> None:
        self._skip_blanks()
        start = self.pos
        char = self._peek()
        if char in _QUOTES:
            end = self.text.find(char, start + 1)
            if end < 0:
                raise self._error(f"unterminated include file name: missing closing {char}", start)
            name = self.text[start + 1 : end]
            self.pos = end + 1
        elif char == "" or char in _NEWLINES:
            raise self._error("expected a file name after 'include'", start)
        elif char in "[{(":
            raise self._error(f"expected a file name after 'include', but found {char!r}", start)
        else:
            match = _INCLUDE_BARE_RE.match(self.text, start)
            if match is None:  # ';', '}' or a blank other than space and tab: no name at all
                raise self._error("expected a file name after 'include'", start)
            name = match.group()
            self.pos = match.end()
        self._include_file(target, name, keyword_pos)

    def _include_file(self, target: dict, name: str, keyword_pos: int) -> None:
        base_dir = os.path.dirname(self.path) if self.path else ""
        # Cleaned as Go's filepath.Join does, so errors name "b.conf", not "./b.conf".
        file_path = os.path.normpath(os.path.join(base_dir, name))
        real_path = os.path.realpath(file_path)
        if real_path in self.include_chain:
            loop = self.include_chain[self.include_chain.index(real_path) :] + (real_path,)
            raise self._error("include cycle: " + " -> ".join(loop), keyword_pos)
        try:
            text = _read_config_text(file_path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise self._error(
                f"error parsing include file {name!r}: cannot read {file_path!r}: {reason}", keyword_pos
            ) from exc
        except ConfigError as exc:
            raise self._included_error(exc, keyword_pos) from exc
        # The included file is a document of its own: its variables cannot see
        # ours, but its entries land in our map, where later entries can use them.
        included = self._included_parser(text, file_path, self.include_chain + (real_path,))
        try:
            entries = included.parse_document()
        except ConfigError as exc:
            raise self._included_error(exc, keyword_pos) from exc
        self._merge_included(target, entries)

    def _included_parser(self, text: str, file_path: str, include_chain: tuple) -> _Parser:
        """The parser for an included file (subclasses return their own kind)."""
        return _Parser(text, path=file_path, env=self.env, include_chain=include_chain, env_chain=())

    def _merge_included(self, target: dict, entries: dict) -> None:
        target.update(entries)

    def _included_error(self, error: ConfigError, keyword_pos: int) -> ConfigError:
        # Report the position inside the included file, and say where it was
        # included from (like a C compiler's "In file included from").
        return ConfigError(
            f"{error.reason} (in file included from {self._where(keyword_pos)})",
            path=error.path,
            line=error.line,
            column=error.column,
        )

    # -- values --------------------------------------------------------------

    def _parse_value(self):
        char = self._peek()
        if char == "[":
            return self._parse_array()
        if char == "{":
            return self._parse_map()
        if char == '"':
            return self._parse_double_quoted()
        if char == "'":
            return self._parse_single_quoted()
        if char == "(":
            return self._parse_block_string()
        if char == "":
            raise self._error("expected a value, but reached the end of the file")
        if char in _NEWLINES:
            raise self._error("expected a value, but found a new line")
        return self._parse_bare_value()

    def _parse_map(self) -> dict:
        brace = self.pos
        self.pos += 1
        members: dict = {}
        self.scopes.append(members)
        try:
            self._parse_entries(members, opened_at=brace, top_level=False)
        finally:
            self.scopes.pop()
        return members

    def _parse_array(self) -> list:
        bracket = self.pos
        self.pos += 1
        items: list = []
        while True:
            self._skip_space_and_comments()
            char = self._peek()
            if char == "]":
                self.pos += 1
                return items
            if char == "":
                raise self._error("'[' is never closed: expected ']' before the end of the file", bracket)
            if char == ",":
                raise self._error("unexpected ',' in array: expected a value or ']'")
            items.append(self._parse_value())
            # Values are separated by a comma or a new line (a comment ends
            # its line, so it counts as a new line).
            self._skip_blanks()
            char = self._peek()
            if char == "," or char in _NEWLINES:
                self.pos += 1
            elif self._at_comment():
                self._skip_comment()
            elif char == "":
                raise self._error("'[' is never closed: expected ']' before the end of the file", bracket)
            elif char != "]":
                raise self._error(f"expected ',' or ']' after an array value, but found {char!r}")

    def _parse_single_quoted(self) -> str:
        start = self.pos
        end = self.text.find("'", start + 1)
        if end < 0:
            raise self._error("unterminated string: missing closing '", start)
        self.pos = end + 1
        return self.text[start + 1 : end]

    def _parse_double_quoted(self) -> str:
        start = self.pos
        self.pos += 1
        raw = bytearray()
        while True:
            match = _DOUBLE_QUOTED_RUN_RE.match(self.text, self.pos)
            if match:
                raw += match.group().encode("utf-8", errors="surrogatepass")
                self.pos = match.end()
            char = self._peek()
            if char == '"':
                self.pos += 1
                return self._decode(raw, start)
            if char == "":
                raise self._error('unterminated string: missing closing "', start)
            self._read_escape(raw)

    def _parse_block_string(self) -> str:
        # "(" starts a block that ends at a ")" alone at the start of a line;
        # the text in between, new lines included, is the value.
        start = self.pos
        end = _BLOCK_STRING_END_RE.search(self.text, start + 1)
        if end is None:
            raise self._error("unterminated block string: expected ')' alone at the start of a line", start)
        self.pos = end.end()
        return self.text[start + 1 : end.start() + 1]

    def _read_escape(self, raw: bytearray) -> None:
        """Append the escape sequence at the current backslash to ``raw``."""
        escape_pos = self.pos
        self.pos += 1
        kind = self._peek()
        if kind in _SIMPLE_ESCAPES:
            raw += _SIMPLE_ESCAPES[kind].encode()
            self.pos += 1
        elif kind == "x":
            digits = self.text[self.pos + 1 : self.pos + 3]
            if not _HEX2_RE.fullmatch(digits):
                raise self._error(
                    f"expected two hexadecimal digits after '\\x', but found {digits!r}", escape_pos
                )
            raw.append(int(digits, 16))
            self.pos += 3
        elif kind == "u":
            code = self._read_hex4(escape_pos)
            if 0xD800 <= code <= 0xDBFF and self.text.startswith("\\u", self.pos):
                # A UTF-16 surrogate pair, as JSON writes characters beyond U+FFFF.
                low_pos = self.pos
                self.pos += 1
                low = self._read_hex4(low_pos)
                if 0xDC00 <= low <= 0xDFFF:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                else:
                    self.pos = low_pos
            if 0xD800 <= code <= 0xDFFF:
                raise self._error(f"invalid \\u escape: lone surrogate U+{code:04X}", escape_pos)
            raw += chr(code).encode("utf-8")
        else:
            shown = "the end of the file" if kind == "" else repr(kind)
            raise self._error(
                f"invalid escape character {shown}; allowed escapes: {_ALLOWED_ESCAPES}", escape_pos
            )

    def _read_hex4(self, escape_pos: int) -> int:
        """Read "u" and four hex digits at the current position."""
        digits = self.text[self.pos + 1 : self.pos + 5]
        if not _HEX4_RE.fullmatch(digits):
            raise self._error(
                f"expected four hexadecimal digits after '\\u', but found {digits!r}", escape_pos
            )
        self.pos += 5
        return int(digits, 16)

    def _parse_bare_value(self):
        start = self.pos
        word, escaped = self._scan_bare_word()
        if escaped:
            return word  # escapes make a word a plain string, as in nats-server
        if not word:
            raise self._error(f"expected a value, but found {self._peek()!r}")
        first = word[0]
        if first == "-" or "0" <= first <= "9":
            return self._parse_number_like(word, start)
        if first == "." and word[1:2].isdigit():
            raise self._error(f"invalid number {word!r}: floats must start with a digit", start)
        lowered = word.lower()
        if lowered in _BOOLEANS:
            return _BOOLEANS[lowered]
        if first == "$":
            return self._resolve_variable(word[1:], start)
        return word

    def _scan_bare_word(self) -> tuple[str, bool]:
        """Read a bare word; return its text (escapes applied) and whether it had escapes."""
        start = self.pos
        match = _BARE_RUN_RE.match(self.text, start)
        if match:
            self.pos = match.end()
        if self._peek() != "\\":
            return self.text[start : self.pos], False
        raw = bytearray(self.text[start : self.pos].encode("utf-8", errors="surrogatepass"))
        while self._peek() == "\\":
            self._read_escape(raw)
            match = _BARE_RUN_RE.match(self.text, self.pos)
            if match:
                raw += match.group().encode("utf-8", errors="surrogatepass")
                self.pos = match.end()
        return self._decode(raw, start), True

    def _parse_number_like(self, word: str, start: int):
        sized = _SIZED_INT_RE.fullmatch(word)
        if sized:
            digits, suffix = sized.groups()
            value = int(digits) * (_SIZE_MULTIPLIERS[suffix.lower()] if suffix else 1)
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise self._error(f"integer {word!r} is out of the range of a 64-bit integer", start)
            return value
        if _FLOAT_RE.fullmatch(word):
            real = float(word)
            if math.isinf(real):
                raise self._error(f"float {word!r} is out of range", start)
            return real
        if word[0] == "-":
            if not word[1:2].isdigit():
                raise self._error(f"invalid number {word!r}: expected a digit after '-'", start)
            raise self._error(f"invalid number {word!r}", start)
        if _DATETIME_START_RE.match(word):
            if not _DATETIME_RE.fullmatch(word):
                raise self._error(
                    f"invalid datetime {word!r}: datetimes must be in full ISO-8601 Zulu form, "
                    "like 2016-05-04T18:53:41Z",
                    start,
                )
            try:
                parsed = datetime.strptime(word, "%Y-%m-%dT%H:%M:%SZ")
            except ValueError as exc:
                raise self._error(f"invalid datetime {word!r}: {exc}", start) from None
            return parsed.replace(tzinfo=timezone.utc)
        # Words that merely start with a digit are strings in nats-server:
        # 127.0.0.1:4222, 10s, 1h30m, 3Gyz.
        return word

    # -- variables -----------------------------------------------------------

    def _resolve_variable(self, name: str, pos: int):
        line, _ = self._location(pos)
        if not name:
            raise self._error("'$' must be followed by a variable name", pos)
        if name.startswith("{"):
            raise self._error(
                f"'${name}}}': the ${{NAME}} form is not part of the nats-server format; write $NAME", pos
            )
        if _BCRYPT_REFERENCE_RE.match(name):
            return "$" + name
        for scope in reversed(self.scopes):
            if name in scope:
                # A copy, so that the two keys do not share one list or map.
                return copy.deepcopy(scope[name])
        if name in self.env_chain:
            loop = self.env_chain[self.env_chain.index(name) :] + (name,)
            raise self._error(
                f"variable reference cycle for {name!r}: " + " -> ".join("$" + n for n in loop),
                pos,
                _ReferenceCycleError,
            )
        raw_value = self.env.get(name)
        if raw_value is None:
            raise self._error(f"variable reference for '{name}' on line {line} can not be found", pos)
        if not raw_value.strip():
            return ""
        # As nats-server, parse the environment value as the value of a key
        # in a document of its own, so "4222" becomes an int and "$OTHER" is
        # expanded in turn.
        env_document = _Parser(
            f"{_ENV_VALUE_KEY}={raw_value}",
            path=None,
            env=self.env,
            include_chain=self.include_chain,
            env_chain=self.env_chain + (name,),
        )
        try:
            return env_document.parse_document()[_ENV_VALUE_KEY]
        except _ReferenceCycleError as exc:
            raise self._error(exc.reason, pos, _ReferenceCycleError) from exc
        except ConfigError as exc:
            raise self._error(
                f"variable reference for '{name}' on line {line} could not be parsed: {exc.reason}", pos
            ) from exc


def _read_config_text(path: str) -> str:
    """Read a configuration file as UTF-8 (a byte-order mark is ignored)."""
    with open(path, "rb") as file:
        data = file.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8-sig")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        raise ConfigError("the file is not valid UTF-8", path=path, line=line, column=column) from None


def parse(text: str, *, path: str | None = None, env: Mapping[str, str] | None = None) -> dict:
    """Parse configuration ``text`` into nested plain Python values.

    ``path`` names the file the text came from: it appears in errors, and
    includes are resolved relative to its directory (to the current
    directory when it is None). ``env`` replaces ``os.environ`` for
    ``$variable`` look-ups.
    """
    if path is not None:
        path = os.fspath(path)
    parser = _Parser(
        text,
        path=path,
        env=os.environ if env is None else env,
        include_chain=(os.path.realpath(path),) if path is not None else (),
        env_chain=(),
    )
    return parser.parse_document()


def parse_file(path, *, env: Mapping[str, str] | None = None) -> dict:
    """Read and parse the configuration file at ``path``."""
    path = os.fspath(path)
    try:
        text = _read_config_text(path)
    except OSError as exc:
        raise ConfigError(f"error opening config file: {exc.strerror or exc}", path=path) from exc
    return parse(text, path=path, env=env)


def to_int(value) -> int:
    """An int, or a string such as "64MB", "1k" or "-1", as an int.

    Size suffixes are those of the configuration format: k, m, g, t, p, e are
    powers of 1000; kb/ki/kib, mb/mi/mib, ... are powers of 1024 (any case).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or a size such as '64MB', not the boolean {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        sized = _SIZED_INT_RE.fullmatch(value.strip())
        if sized:
            digits, suffix = sized.groups()
            return int(digits) * (_SIZE_MULTIPLIERS[suffix.lower()] if suffix else 1)
    raise ValueError(f"expected an integer or a size such as '64MB', got {value!r}")


_GO_JSON_ESCAPES = str.maketrans(dict(GO_JSON_ESCAPES))  # Go's HTML-safe escapes


def config_digest(values: dict) -> str:
    """nats-server 2.10+'s digest of a parsed configuration (conf/parse.go configDigest): the
    sha256 of Go's json.Encoder output of the values (keys sorted, HTML characters escaped, a
    trailing newline), as ``sha256:<hex>``. `-t`, the startup log and /varz show it."""
    import hashlib

    text = _go_json(values).translate(_GO_JSON_ESCAPES) + "\n"
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _go_json(value) -> str:
    """``value`` as Go's encoding/json writes it (map keys sorted, floats in Go's form)."""
    import json

    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + _go_json(v)
                              for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_go_json(item) for item in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        text = repr(value)
        if "e" in text:  # Go: 1e-07 is 1e-7, 1e21 is 1e+21
            mantissa, exponent = text.split("e")
            sign = "-" if exponent.startswith("-") else "+"
            text = f"{mantissa}e{sign}{int(exponent.lstrip('+-'))}"
        return text
    if isinstance(value, datetime):  # Go's time.Time: RFC 3339, fractional seconds only if any
        text = value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        return json.dumps(text.replace(".000000", ""))
    return json.dumps(str(value), ensure_ascii=False)
