"""Tests for natserver.config.conf, the nats-server configuration file parser."""

import pickle
from datetime import datetime, timezone

import pytest

from natserver.config.conf import ConfigError, parse, parse_duration, parse_file, to_int


def parse_error(text, **kwargs) -> ConfigError:
    kwargs.setdefault("env", {})
    with pytest.raises(ConfigError) as info:
        parse(text, **kwargs)
    return info.value


# -- key/value separators, keys and terminators ----------------------------------


@pytest.mark.parametrize(
    "text",
    ["port 4222", "port: 4222", "port = 4222", "port=4222", "port:4222", "port\t=\t4222", "  port   4222  "],
)
def test_key_value_separators(text):
    assert parse(text) == {"port": 4222}


def test_quoted_keys():
    text = """
    "double quoted": 1
    'single quoted' = 2
    "with: colon=and spaces" 3
    "" = 4
    """
    assert parse(text) == {"double quoted": 1, "single quoted": 2, "with: colon=and spaces": 3, "": 4}


def test_quoted_keys_are_raw():
    assert parse(r'"a\tb" = 1') == {r"a\tb": 1}


def test_bare_keys_keep_punctuation():
    assert parse("a.b-c_d/e = 1\nkey$ 2") == {"a.b-c_d/e": 1, "key$": 2}


def test_semicolon_and_comma_terminators():
    assert parse("a = 1; b = 2, c = 3;\nd: 4,") == {"a": 1, "b": 2, "c": 3, "d": 4}


def test_value_may_follow_key_on_a_later_line():
    assert parse("authorization\n{\n  user: a\n}\nport\n\n4222") == {"authorization": {"user": "a"}, "port": 4222}


def test_map_members_may_put_value_on_line_after_separator():
    assert parse("m {\n  a =\n    1\n}") == {"m": {"a": 1}}


def test_duplicate_keys_later_wins():
    text = """
    port = 1
    port = 2
    m { a = 1, a = 2 }
    m { b = 3 }
    """
    assert parse(text) == {"port": 2, "m": {"b": 3}}


def test_empty_documents():
    assert parse("") == {}
    assert parse("\n   \n\t\n") == {}
    assert parse("# just a comment\n// and another\n") == {}
    assert parse("{}") == {}


def test_crlf_line_endings():
    text = "port: 4222\r\nauth {\r\n  user: a\r\n  pass: 'b'\r\n}\r\nlist [\r\n 1\r\n 2\r\n]\r\n"
    assert parse(text) == {"port": 4222, "auth": {"user": "a", "pass": "b"}, "list": [1, 2]}


# -- maps ----------------------------------------------------------------------------


@pytest.mark.parametrize("opening", ["m {", "m: {", "m = {", "m{"])
def test_map_separators(opening):
    assert parse(opening + " a: 1 }") == {"m": {"a": 1}}


def test_nested_maps():
    text = """
    foo  {
      host {
        ip   = '127.0.0.1'
        port = 4242
      }
      servers = [ "a.com", "b.com", "c.com"]
    }
    """
    assert parse(text) == {
        "foo": {"host": {"ip": "127.0.0.1", "port": 4242}, "servers": ["a.com", "b.com", "c.com"]}
    }


def test_map_members_separated_by_commas_semicolons_and_newlines():
    assert parse("m { a: 1, b: 2; c: 3\n d: 4, }") == {"m": {"a": 1, "b": 2, "c": 3, "d": 4}}
    assert parse("m {}\nn { }") == {"m": {}, "n": {}}


def test_json_document():
    text = """
    {
      "http_port": 8227,
      "port": 4227,
      "write_deadline": "1h",
      "cluster": {
        "port": 6222,
        "routes": [
          "nats://127.0.0.1:4222",
          "nats://127.0.0.1:4223"
        ]
      },
      "jetstream": {
        "store_dir": "/tmp/nats"
        "max_mem": 1000000,
      },
      "debug": False
    }
    """
    assert parse(text) == {
        "http_port": 8227,
        "port": 4227,
        "write_deadline": "1h",
        "cluster": {"port": 6222, "routes": ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]},
        "jetstream": {"store_dir": "/tmp/nats", "max_mem": 1000000},
        "debug": False,
    }


def test_top_level_braces_add_no_level():
    assert parse("{ listen: 0.0.0.0:4222 }") == {"listen": "0.0.0.0:4222"}
    text = """
    {
      {
        listen: 0.0.0.0:4222 // comment
      }
      # comment
    }
    """
    assert parse(text) == {"listen": "0.0.0.0:4222"}


def test_stray_closing_brace_at_top_level_is_ignored_like_nats_server():
    assert parse("accounts { users = [{}]}\n}\n") == {"accounts": {"users": [{}]}}


# -- arrays --------------------------------------------------------------------------


def test_arrays_single_line():
    assert parse("a = [1, 2, 3, 'bar']") == {"a": [1, 2, 3, "bar"]}
    assert parse("a = [1,2,3]") == {"a": [1, 2, 3]}
    assert parse("a = []\nb = [ ]") == {"a": [], "b": []}


def test_arrays_multi_line_with_newlines_commas_comments_and_trailing_comma():
    text = """
    routes = [
      nats-route://foo:bar@host:4245   # first
      nats-route://foo:bar@host:4246,  // second
      # a comment on its own line

      "nats://c:4247",
    ]
    """
    assert parse(text) == {
        "routes": ["nats-route://foo:bar@host:4245", "nats-route://foo:bar@host:4246", "nats://c:4247"]
    }


def test_arrays_of_maps():
    text = "users = [ {user: a, password: b}, {user: c, password: d} ]"
    assert parse(text) == {"users": [{"user": "a", "password": "b"}, {"user": "c", "password": "d"}]}
    text = """
    array [
      { abc: 123 }
      { xyz: "word" }
    ]
    """
    assert parse(text) == {"array": [{"abc": 123}, {"xyz": "word"}]}


def test_nested_and_mixed_arrays():
    assert parse("a = [[1, 2], [], [x, [y]], {k: [true]}]") == {"a": [[1, 2], [], ["x", ["y"]], {"k": [True]}]}


def test_arrays_of_bare_host_ports():
    assert parse("listen = [localhost:4222, localhost:4333]") == {"listen": ["localhost:4222", "localhost:4333"]}


# -- comments ------------------------------------------------------------------------


def test_comments():
    text = """
    # hash comment
    // slash comment
    a = 1 # trailing hash
    b = 2 // trailing slashes
    c = "not # a comment"
    d = 'not // a comment'
    e = http://example.com/path
    f = color#1
    m { # comment after brace
      x = 1 // inside map
    } # after map
    """
    assert parse(text) == {
        "a": 1,
        "b": 2,
        "c": "not # a comment",
        "d": "not // a comment",
        "e": "http://example.com/path",
        "f": "color#1",
        "m": {"x": 1},
    }


def test_comment_at_end_of_file_without_newline():
    assert parse("a = 1 # no newline") == {"a": 1}
    assert parse("a = 1\n// no newline") == {"a": 1}


# -- strings -------------------------------------------------------------------------


def test_double_quoted_escapes():
    text = r'''s = "tab\tnl\nret\rquote\"backslash\\end"'''
    assert parse(text) == {"s": 'tab\tnl\nret\rquote"backslash\\end'}


def test_double_quoted_hex_escapes_are_utf8_bytes():
    assert parse(r's = "\x41\xc3\xa9"') == {"s": "Aé"}


def test_double_quoted_unicode_escapes():
    assert parse(r's = "caf\u00e9 \u20AC \ud83d\ude00"') == {"s": "café € \U0001f600"}


def test_double_quoted_string_spans_lines_and_keeps_specials():
    assert parse('s = "a\n  b # c, d; e}"') == {"s": "a\n  b # c, d; e}"}


def test_quoted_strings_are_never_numbers_booleans_or_variables():
    text = """a = "4222"\nb = 'true'\nc = "$HOME"\nd = '2m'\ne = "2016-05-04T18:53:41Z"\nf = ''"""
    assert parse(text, env={"HOME": "/root"}) == {
        "a": "4222",
        "b": "true",
        "c": "$HOME",
        "d": "2m",
        "e": "2016-05-04T18:53:41Z",
        "f": "",
    }


def test_single_quoted_strings_are_raw_and_may_span_lines():
    text = "path = 'C:\\dir\\new'\ntext = 'multi-line\ntext \"block\".'"
    assert parse(text) == {"path": "C:\\dir\\new", "text": 'multi-line\ntext "block".'}


def test_bare_words():
    text = """
    host: 127.0.0.1
    listen: 0.0.0.0:4222
    name: my-server_1
    url: nats://user:pw@localhost:4222
    path: /var/lib/nats
    unicode: héllo
    subject: foo.*.>
    """
    assert parse(text) == {
        "host": "127.0.0.1",
        "listen": "0.0.0.0:4222",
        "name": "my-server_1",
        "url": "nats://user:pw@localhost:4222",
        "path": "/var/lib/nats",
        "unicode": "héllo",
        "subject": "foo.*.>",
    }


def test_bare_words_understand_escapes_like_nats_server():
    assert parse(r"a = x\ty") == {"a": "x\ty"}
    # An escape makes the word a plain string, never a boolean or a number.
    assert parse(r"a = tru\x65") == {"a": "true"}


def test_block_strings():
    assert parse("numbers (\n1234567890\n)\n") == {"numbers": "\n1234567890\n"}
    # Only a ")" alone at the start of a line ends the block.
    text = "numbers (\n  12(34)56\n  (\n    7890\n  )\n)\nafter = 1"
    assert parse(text) == {"numbers": "\n  12(34)56\n  (\n    7890\n  )\n", "after": 1}
    assert parse("b = (\nlast line\n)") == {"b": "\nlast line\n"}


# -- numbers -------------------------------------------------------------------------


def test_integers_and_floats():
    text = "a = 4222\nb = -1\nc = 0\nd = 0.5\ne = -2.25\nf = 007"
    result = parse(text)
    assert result == {"a": 4222, "b": -1, "c": 0, "d": 0.5, "e": -2.25, "f": 7}
    assert type(result["a"]) is int and type(result["d"]) is float


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("1k", 1000),
        ("8K", 8000),
        ("4kb", 4096),
        ("3ki", 3072),
        ("4KiB", 4096),
        ("1m", 1_000_000),
        ("2MB", 2 * 1024**2),
        ("2Mi", 2 * 1024**2),
        ("1MiB", 1_048_576),
        ("64MB", 67_108_864),
        ("2g", 2_000_000_000),
        ("22GB", 22 * 1024**3),
        ("22gi", 22 * 1024**3),
        ("22GiB", 22 * 1024**3),
        ("1t", 1000**4),
        ("22TB", 22 * 1024**4),
        ("1p", 1000**5),
        ("22Pi", 22 * 1024**5),
        ("1e", 1000**6),
        ("1EB", 1024**6),
        ("-1k", -1000),
        ("-2MB", -2 * 1024**2),
    ],
)
def test_size_suffixes(word, expected):
    assert parse(f"v = {word}") == {"v": expected}
    assert parse(f"v = [{word}]") == {"v": [expected]}


def test_bare_2m_is_a_size_as_in_nats_server_but_other_durations_stay_strings():
    text = 'a = 2m\nb = "2m"\nc = 10s\nd = 250ms\ne = 1h30m\nf = 1.5s\ng = 100ms\nh = 3Gyz'
    assert parse(text) == {
        "a": 2_000_000,
        "b": "2m",
        "c": "10s",
        "d": "250ms",
        "e": "1h30m",
        "f": "1.5s",
        "g": "100ms",
        "h": "3Gyz",
    }


def test_integer_out_of_range():
    err = parse_error("big = 9223372036854775808")
    assert (err.line, err.column) == (1, 7)
    assert "out of the range" in err.reason
    assert parse("max = 9223372036854775807") == {"max": 2**63 - 1}
    assert "out of the range" in parse_error("big = 9EB").reason


def test_bad_negative_numbers():
    err = parse_error("a = -x")
    assert (err.line, err.column) == (1, 5)
    assert "digit after '-'" in err.reason
    assert "invalid number" in parse_error("a = -1abc").reason


def test_float_must_start_with_a_digit():
    err = parse_error("a = .5")
    assert (err.line, err.column) == (1, 5)
    assert "floats must start with a digit" in err.reason


# -- booleans and datetimes ----------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        ("Yes", True),
        ("on", True),
        ("ON", True),
        ("false", False),
        ("False", False),
        ("no", False),
        ("NO", False),
        ("off", False),
        ("Off", False),
    ],
)
def test_booleans(word, expected):
    assert parse(f"flag = {word}") == {"flag": expected}


def test_words_that_only_resemble_booleans_are_strings():
    assert parse("a = truely\nb = yess\nc = 'on'") == {"a": "truely", "b": "yess", "c": "on"}


def test_datetime():
    result = parse("now = 2016-05-04T18:53:41Z\ngmt = false")
    assert result == {"now": datetime(2016, 5, 4, 18, 53, 41, tzinfo=timezone.utc), "gmt": False}


@pytest.mark.parametrize("word", ["2016-05-04", "2016-05-04T18:53:41", "2016-13-04T18:53:41Z", "10-20"])
def test_bad_datetimes(word):
    err = parse_error(f"now = {word}")
    assert (err.line, err.column) == (1, 7)
    assert "datetime" in err.reason


# -- variables -----------------------------------------------------------------------


def test_variables_from_the_file():
    assert parse("index = 22\nfoo = $index") == {"index": 22, "foo": 22}


def test_variables_innermost_scope_first():
    text = """
    index = 22
    nest {
      index = 11
      foo = $index
      deeper { bar = $index }
    }
    bar = $index
    """
    assert parse(text) == {"index": 22, "nest": {"index": 11, "foo": 11, "deeper": {"bar": 11}}, "bar": 22}


def test_variables_in_arrays_and_maps_inside_arrays():
    text = """
    PASS = secret
    users = [
      {user: alice, password: $PASS}
      $PASS
    ]
    """
    assert parse(text) == {"PASS": "secret", "users": [{"user": "alice", "password": "secret"}, "secret"]}


def test_variable_values_are_copies():
    result = parse("base = {a: [1]}\ncopy = $base")
    assert result["copy"] == {"a": [1]}
    result["copy"]["a"].append(2)
    assert result["base"] == {"a": [1]}


def test_file_variables_shadow_the_environment():
    assert parse("PORT = 1\nport = $PORT", env={"PORT": "2"}) == {"PORT": 1, "port": 1}


def test_variables_from_env_are_parsed_as_values():
    env = {
        "PORT": "4222",
        "NAME": "xyz",
        "QUOTED": "'3xyz'",
        "SIZE": "1MB",
        "FLAG": "yes",
        "LIST": "[a, b]",
        "MAP": "{ user: a, pass: 'b' }",
        "FLOAT": "0.5",
        "STARTS_WITH_DIGIT": "3Gyz",
        "EMPTY": "",
    }
    text = "\n".join(f"{name.lower()} = ${name}" for name in env)
    assert parse(text, env=env) == {
        "port": 4222,
        "name": "xyz",
        "quoted": "3xyz",
        "size": 1048576,
        "flag": True,
        "list": ["a", "b"],
        "map": {"user": "a", "pass": "b"},
        "float": 0.5,
        "starts_with_digit": "3Gyz",
        "empty": "",
    }


def test_env_values_may_refer_to_other_env_values():
    assert parse("a = $A", env={"A": "$B", "B": "42"}) == {"a": 42}


def test_env_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("NATSERVER_TEST_CONF_PORT", "4333")
    assert parse("port = $NATSERVER_TEST_CONF_PORT") == {"port": 4333}


def test_bcrypt_hashes_are_not_variables():
    text = """
    a: $2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy
    b: $2b$10$UHR6GhotWhpLsKtVP0/i6.Nh9
    c: [$2y$04$abc]
    """
    assert parse(text, env={}) == {
        "a": "$2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy",
        "b": "$2b$10$UHR6GhotWhpLsKtVP0/i6.Nh9",
        "c": ["$2y$04$abc"],
    }


def test_undefined_variable():
    err = parse_error("a = 1\nm {\n  foo = $NOPE\n}")
    assert err.reason == "variable reference for 'NOPE' on line 3 can not be found"
    assert (err.line, err.column) == (3, 9)


def test_variables_cannot_see_keys_defined_later():
    err = parse_error("a = $b\nb = 1")
    assert "'b'" in err.reason and "can not be found" in err.reason


def test_env_reference_cycles():
    err = parse_error("x = 1\nTEST: $A", env={"A": "$A"})
    assert "variable reference cycle for 'A'" in err.reason
    assert (err.line, err.column) == (2, 7)

    err = parse_error("TEST: $A", env={"A": "$B", "B": "$C", "C": "$A"})
    assert err.reason == "variable reference cycle for 'A': $A -> $B -> $C -> $A"
    assert (err.line, err.column) == (1, 7)


def test_env_value_that_does_not_parse():
    err = parse_error("TEST: $A", env={"A": "include x"})
    assert err.reason.startswith("variable reference for 'A' on line 1 could not be parsed: ")
    assert (err.line, err.column) == (1, 7)
    assert "could not be parsed" in parse_error("t = $A", env={"A": "'unterminated"}).reason


def test_malformed_variable_references():
    assert "followed by a variable name" in parse_error("a = $").reason
    err = parse_error("a = ${NAME}", env={"NAME": "x"})
    assert "write $NAME" in err.reason
    assert (err.line, err.column) == (1, 5)


# -- includes ------------------------------------------------------------------------


def test_include_forms_and_merge_order(tmp_path):
    (tmp_path / "inc.conf").write_text("a = included\nb = included\n")
    for line in ['include "inc.conf"', "include 'inc.conf'", "include inc.conf", "INCLUDE inc.conf;"]:
        main = tmp_path / "main.conf"
        main.write_text(f"a = before\nc = before\n{line}\nb = after\n")
        assert parse_file(main) == {"a": "included", "c": "before", "b": "after"}


def test_include_without_a_file_name_is_a_config_error():
    # `include` followed by ';' or '}' has no name: a ConfigError, not an AttributeError from the
    # parser (nats-server fails too, trying to read the directory as the file '').
    for text in ["include ;", "include }", "a { include }\n}", "include \x0b"]:
        with pytest.raises(ConfigError) as info:
            parse(text)
        assert info.value.reason == "expected a file name after 'include'"
        assert (info.value.line, info.value.column) == (1, text.index("include") + 9)


def test_include_inside_a_map(tmp_path):
    (tmp_path / "users.conf").write_text("users = [{user: alice, password: secret}]\n")
    main = tmp_path / "main.conf"
    main.write_text("authorization {\n  include 'users.conf' # pull in users\n  timeout: 0.5\n}\n")
    assert parse_file(main) == {"authorization": {"users": [{"user": "alice", "password": "secret"}], "timeout": 0.5}}
    main.write_text("accounts { foo { include 'users.conf'} }")
    assert parse_file(main) == {"accounts": {"foo": {"users": [{"user": "alice", "password": "secret"}]}}}


def test_nested_includes_are_relative_to_the_including_file(tmp_path):
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "passwords.conf").write_text(
        "ALICE_PASS: $2a$10$UHR6GhotWhpLsKtVP0/i6.Nh9\nBOB_PASS: bob\n"
    )
    (tmp_path / "includes" / "users.conf").write_text(
        "include ./passwords.conf;\nusers = [\n  {user: alice, password: $ALICE_PASS}\n  {user: bob, password: $BOB_PASS}\n]\n"
    )
    (tmp_path / "main.conf").write_text(
        "listen: 127.0.0.1:4222\nauthorization {\n  include 'includes/users.conf'\n  timeout: 0.5\n}\n"
    )
    assert parse_file(tmp_path / "main.conf", env={}) == {
        "listen": "127.0.0.1:4222",
        "authorization": {
            "ALICE_PASS": "$2a$10$UHR6GhotWhpLsKtVP0/i6.Nh9",
            "BOB_PASS": "bob",
            "users": [
                {"user": "alice", "password": "$2a$10$UHR6GhotWhpLsKtVP0/i6.Nh9"},
                {"user": "bob", "password": "bob"},
            ],
            "timeout": 0.5,
        },
    }


def test_included_keys_are_usable_as_variables_afterwards(tmp_path):
    (tmp_path / "vars.conf").write_text("TEST_PORT: $PORT_FROM_ENV\n")
    (tmp_path / "main.conf").write_text('include "./vars.conf"\nport: $TEST_PORT\n')
    assert parse_file(tmp_path / "main.conf", env={"PORT_FROM_ENV": "7890"}) == {"TEST_PORT": 7890, "port": 7890}


def test_included_file_does_not_see_the_including_files_variables(tmp_path):
    (tmp_path / "inc.conf").write_text("b = $a\n")
    (tmp_path / "main.conf").write_text("a = 1\ninclude inc.conf\n")
    with pytest.raises(ConfigError) as info:
        parse_file(tmp_path / "main.conf", env={})
    assert info.value.path == str(tmp_path / "inc.conf")
    assert "'a'" in info.value.reason


def test_include_with_parse_relative_to_path_or_cwd(tmp_path, monkeypatch):
    (tmp_path / "inc.conf").write_text("x = 1")
    assert parse("include inc.conf", path=str(tmp_path / "whatever.conf")) == {"x": 1}
    monkeypatch.chdir(tmp_path)
    assert parse("include inc.conf") == {"x": 1}


def test_include_json_files(tmp_path):
    (tmp_path / "foo.json").write_text('{ "users": [ {"user": "foo"} ] }')
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "main.conf").write_text("accounts {\n  foo { include 'foo.json' }\n  bar { include 'empty.json' }\n}\n")
    assert parse_file(tmp_path / "main.conf") == {"accounts": {"foo": {"users": [{"user": "foo"}]}, "bar": {}}}


def test_include_of_a_missing_file(tmp_path):
    main = tmp_path / "main.conf"
    main.write_text("port = 1\nm {\n    include 'missing.conf'\n}\n")
    with pytest.raises(ConfigError) as info:
        parse_file(main)
    err = info.value
    assert (err.path, err.line, err.column) == (str(main), 3, 5)
    assert err.reason.startswith("error parsing include file 'missing.conf'")
    assert str(err).startswith(f"{main}:3:5: error parsing include file 'missing.conf'")


def test_syntax_error_in_an_included_file_points_into_that_file(tmp_path):
    (tmp_path / "bad.conf").write_text("ok = 1\nbroken = [1, 2\n")
    main = tmp_path / "main.conf"
    main.write_text("a = 1\ninclude bad.conf\n")
    with pytest.raises(ConfigError) as info:
        parse_file(main)
    err = info.value
    assert (err.path, err.line, err.column) == (str(tmp_path / "bad.conf"), 2, 10)
    assert f"in file included from {main}:2:1" in err.reason


def test_include_cycles_are_detected(tmp_path):
    (tmp_path / "a.conf").write_text("include b.conf\n")
    (tmp_path / "b.conf").write_text("x = 1\ninclude a.conf\n")
    with pytest.raises(ConfigError) as info:
        parse_file(tmp_path / "a.conf")
    assert "include cycle" in info.value.reason
    (tmp_path / "self.conf").write_text("include self.conf\n")
    with pytest.raises(ConfigError, match="include cycle"):
        parse_file(tmp_path / "self.conf")


def test_include_needs_a_file_name():
    err = parse_error("include\n'x.conf'")
    assert (err.line, err.column) == (1, 8)
    assert "file name" in err.reason
    assert "file name" in parse_error("include { a = 1 }").reason


def test_quoted_include_is_an_ordinary_key():
    assert parse('"include" = 5') == {"include": 5}
    assert parse("include: 5\ninclude=6") == {"include": 6}


# -- errors --------------------------------------------------------------------------


def test_error_str_format():
    err = parse_error('port = 1\nhost = "oops')
    assert (err.path, err.line, err.column) == (None, 2, 8)
    assert str(err) == 'config:2:8: unterminated string: missing closing "'
    err = parse_error('port = 1\nhost = "oops', path="/etc/nats.conf")
    assert str(err) == '/etc/nats.conf:2:8: unterminated string: missing closing "'


def test_config_error_survives_pickling():
    err = parse_error("a = [1,", path="x.conf")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.path, copy.line, copy.column, copy.reason) == (err.path, err.line, err.column, err.reason)
    assert str(copy) == str(err)


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("a = 'unterminated\nstring", 1, 5, "unterminated string"),
        ('a = 1\n  b = "x\\"', 2, 7, "unterminated string"),
        ("m {\n  a = 1\n", 1, 3, "never closed"),
        ("m {\n  n {\n    a = 1\n  }\n", 1, 3, "never closed"),
        ("{\n a = 1\n", 1, 1, "never closed"),
        ("a = [1, 2\n", 1, 5, "never closed"),
        ("a = [1, 2\nb = 3", 2, 3, "expected ',' or ']'"),
        ("a = [1,,2]", 1, 8, "unexpected ','"),
        ("a = [,1]", 1, 6, "unexpected ','"),
        ("a = [1 2]", 1, 8, "expected ',' or ']'"),
        ("a = 1 b = 2", 1, 7, "after the value of 'a'"),
        ("m { a = 1 b = 2 }", 1, 11, "after the value of 'a'"),
        ("a = {x = 1} y", 1, 13, "after the value of 'a'"),
        ("m {\n  a = ]\n}", 2, 7, "expected a value"),
        ("m {\n  ] \n}", 2, 3, "expected a key"),
        ("= 1", 1, 1, "unexpected key separator"),
        ("m { : 1 }", 1, 5, "unexpected key separator"),
        ("a = 1\nlonely", 2, 1, "expected a value for 'lonely'"),
        ("a =\n1", 1, 4, "found a new line"),
        ("a = 1\nb:", 2, 1, "end of the file"),
        ('"unterminated key = 1', 1, 1, "unterminated quoted key"),
        (r'a = "bad \q escape"', 1, 10, "invalid escape character 'q'"),
        (r'a = "\xZZ"', 1, 6, "two hexadecimal digits"),
        (r'a = "\u12"', 1, 6, "four hexadecimal digits"),
        (r'a = "\ud800"', 1, 6, "lone surrogate"),
        (r'a = "\xff"', 1, 5, "UTF-8"),
        ("a = (\nno end\n  )", 1, 5, "unterminated block string"),
    ],
)
def test_syntax_errors_have_line_and_column(text, line, column, fragment):
    err = parse_error(text)
    assert (err.line, err.column) == (line, column), str(err)
    assert fragment in err.reason, str(err)


def test_columns_count_characters_not_bytes():
    err = parse_error("héllo = 'é\nwörld = é é")
    assert (err.line, err.column) == (1, 9)
    err = parse_error("a = 'é'\nwörld = é é")
    assert (err.line, err.column) == (2, 11)


# -- files ---------------------------------------------------------------------------


def test_parse_file_reads_utf8_and_ignores_a_bom(tmp_path):
    conf = tmp_path / "nats.conf"
    conf.write_bytes("\ufeffname: 'héllo'\n".encode())
    assert parse_file(conf) == {"name": "héllo"}
    assert parse_file(str(conf)) == {"name": "héllo"}


def test_parse_file_errors(tmp_path):
    missing = tmp_path / "missing.conf"
    with pytest.raises(ConfigError) as info:
        parse_file(missing)
    assert (info.value.path, info.value.line, info.value.column) == (str(missing), None, None)
    assert str(info.value).startswith(f"{missing}: error opening config file")

    binary = tmp_path / "binary.conf"
    binary.write_bytes(b"a = 1\nb = '\xff'\n")
    with pytest.raises(ConfigError) as info:
        parse_file(binary)
    assert (info.value.line, info.value.column) == (2, 6)
    assert "UTF-8" in info.value.reason


def test_realistic_server_config(tmp_path):
    (tmp_path / "accounts.conf").write_text(
        """
        accounts {
          SYS { users = [{user: sys, password: $SYS_PASS}] }
          APP {
            jetstream: enabled
            users = [
              {user: app, password: "app-secret", permissions: {publish: ["app.>"], subscribe: ">"}}
            ]
          }
        }
        system_account: SYS
        """
    )
    (tmp_path / "nats.conf").write_text(
        """
        # NATS server configuration
        server_name: nats-1
        listen: 0.0.0.0:4222
        http_port: 8222
        max_payload: 1MB
        max_pending: 64MB
        max_connections: 64K
        write_deadline: "10s"
        ping_interval: "100ms"
        ping_max: 3
        debug: false
        trace: off
        logtime: true
        lame_duck_duration: "2m"
        pid_file: "/var/run/nats.pid"

        authorization {
          ADMIN_PASS: $2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy
          users = [
            {user: admin, password: $ADMIN_PASS}
            {user: client, password: 'plain', permissions: {
              publish: { deny: ["admin.>"] }
              subscribe: ["foo.*", "bar.>"]
            }}
          ]
          timeout: 0.5
        }

        cluster {
          name: C1
          listen: 0.0.0.0:6222
          routes = [
            nats-route://127.0.0.1:6223
            nats-route://127.0.0.1:6224
          ]
        }

        tls {
          cert_file: './certs/server.pem'
          key_file: './certs/server-key.pem'
          timeout: 2
        }

        jetstream {
          store_dir: /data/jetstream
          max_memory_store: 1GB
          max_file_store: 10GiB
        }

        include ./accounts.conf
        """
    )
    config = parse_file(tmp_path / "nats.conf", env={"SYS_PASS": "sys-secret"})
    bcrypt = "$2a$11$PWIFAL8RsWyGI3jVZtO9Nu8.6jOxzxfZo7c/W0eLk017hjgUKWrhy"
    assert config == {
        "server_name": "nats-1",
        "listen": "0.0.0.0:4222",
        "http_port": 8222,
        "max_payload": 1_048_576,
        "max_pending": 67_108_864,
        "max_connections": 64_000,
        "write_deadline": "10s",
        "ping_interval": "100ms",
        "ping_max": 3,
        "debug": False,
        "trace": False,
        "logtime": True,
        "lame_duck_duration": "2m",
        "pid_file": "/var/run/nats.pid",
        "authorization": {
            "ADMIN_PASS": bcrypt,
            "users": [
                {"user": "admin", "password": bcrypt},
                {
                    "user": "client",
                    "password": "plain",
                    "permissions": {"publish": {"deny": ["admin.>"]}, "subscribe": ["foo.*", "bar.>"]},
                },
            ],
            "timeout": 0.5,
        },
        "cluster": {
            "name": "C1",
            "listen": "0.0.0.0:6222",
            "routes": ["nats-route://127.0.0.1:6223", "nats-route://127.0.0.1:6224"],
        },
        "tls": {"cert_file": "./certs/server.pem", "key_file": "./certs/server-key.pem", "timeout": 2},
        "jetstream": {"store_dir": "/data/jetstream", "max_memory_store": 1024**3, "max_file_store": 10 * 1024**3},
        "accounts": {
            "SYS": {"users": [{"user": "sys", "password": "sys-secret"}]},
            "APP": {
                "jetstream": "enabled",
                "users": [
                    {
                        "user": "app",
                        "password": "app-secret",
                        "permissions": {"publish": ["app.>"], "subscribe": ">"},
                    }
                ],
            },
        },
        "system_account": "SYS",
    }
    assert parse_duration(config["ping_interval"]) == 0.1
    assert parse_duration(config["lame_duck_duration"]) == 120.0
    assert parse_duration(config["tls"]["timeout"]) == 2.0


# -- parse_duration and to_int -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2m", 120.0),
        ("250ms", 0.25),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("10us", 0.00001),
        ("10µs", 0.00001),
        ("100ns", 0.0000001),
        ("2h45m30.5s", 9930.5),
        ("-1.5h", -5400.0),
        ("+3s", 3.0),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("0", 0.0),
        ("1m0s", 60.0),
        (5, 5.0),
        (0, 0.0),
        (2.5, 2.5),
    ],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "invalid duration"),
        ("5", "missing unit"),
        ("5x", "unknown unit 'x'"),
        ("1d", "unknown unit 'd'"),
        ("s", "invalid duration"),
        (".s", "invalid duration"),
        ("1s2", "missing unit"),
        ("-", "invalid duration"),
        ("10000000000000h", "out of range"),
        (True, "boolean"),
        (None, "expected a duration"),
        ([1], "expected a duration"),
        (float("inf"), "finite"),
    ],
)
def test_parse_duration_errors(value, fragment):
    with pytest.raises(ValueError) as info:
        parse_duration(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (4222, 4222),
        (-1, -1),
        ("100", 100),
        ("1k", 1000),
        ("1KB", 1024),
        ("1MiB", 1_048_576),
        ("64MB", 67_108_864),
        ("64mb", 67_108_864),
        ("2g", 2_000_000_000),
        (" 8 ", 8),
        ("-1", -1),
    ],
)
def test_to_int(value, expected):
    assert to_int(value) == expected


@pytest.mark.parametrize("value", ["", "abc", "1.5", "1 kb", "1kbb", "10s", True, None, 1.0])
def test_to_int_errors(value):
    with pytest.raises(ValueError):
        to_int(value)
