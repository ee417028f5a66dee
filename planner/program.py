"""Compiling a SQL program (CREATE TABLE / CREATE [MATERIALIZED] VIEW statements)."""
from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError as SqlglotParseError, TokenError
from sqlglot.tokens import Token, TokenType

from . import aggregate_functions, query_forms, user_functions
from .bind import DIALECT, Binder, ForeignKey, TableDef, ViewDef, name_of, position_of
from .circuit import Circuit
from .column_check import check_column_types
from .errors import BindError, ParseError, UnsupportedError
from .event_time import EventTimeClause, strip_event_time
from .incrementalize import incrementalize
from .interval_literals import ReadDuckDB
from .rules.aggregate_contents import aggregate_contents
from .rules.share_table_state import share_table_state
from .circuit import stream_tables, streamable
from .logical import Expr, Field, Filter, Node, Project, col, format_plan
from .parsed_nodes import check_parsed
from .rules import Context, format_trace, optimize
from .clock import CLOCK, clock_table, rewrite_now
from .nested_types import empty_map_literals
from .type_spellings import nested_type_spellings
from .typecheck import nondeterministic_call
from .types import BOOLEAN, SUPPORTED_COLUMN_TYPES, from_datatype
from .bind_recursive import DEFAULT_MAX_ITERATIONS
from .user_functions import UserFunction
from .watermarks import Bound, closing_bounds, describe_bounds, event_columns, node_bounds


@dataclass
class Program:
    """A compiled program: tables, views (with plans) and the shared circuit."""

    sql: str
    tables: Dict[str, TableDef] = field(default_factory=dict)
    views: Dict[str, ViewDef] = field(default_factory=dict)
    circuit: Circuit = field(default_factory=Circuit)
    disabled_rules: Optional[frozenset] = None   # None: from SQLENGINE_RULES when compiled
    # event time (planner.watermarks): state op id -> the bound below which its rows may be dropped, and
    # emit-final view -> the bound of its emit_final column
    gc: Dict[int, Bound] = field(default_factory=dict)
    final: Dict[str, Bound] = field(default_factory=dict)
    # the user's functions (planner.user_functions): those declared in Python, then CREATE FUNCTION / MACRO
    functions: Dict[str, UserFunction] = field(default_factory=dict)
    # DECLARE RECURSIVE VIEW name (columns): the declared columns, until the view is created
    declared: Dict[str, Tuple[Field, ...]] = field(default_factory=dict)

    def rules_context(self, views=None, options=()) -> Context:
        """The rewrite rules' context for a view defined after ``views`` (default: all views so far), with the
        view's ``WITH (...)`` options."""
        kw = dict(tables=self.tables, views=dict(self.views if views is None else views), options=dict(options))
        if self.disabled_rules is not None:
            return Context(disabled=self.disabled_rules, **kw)
        ctx = Context.from_env(**kw)
        self.disabled_rules = ctx.disabled   # later views and explain() use the same rules
        return ctx

    def explain(self, view: str, passes: bool = False) -> str:
        """The view's logical plan and the part of the circuit that maintains it; with ``passes``, first the
        bound plan and the plan after each rewrite rule, with the time it took."""
        v = self.views.get(view.lower())
        if v is None:
            raise BindError(f"unknown view '{view}'. Views: {', '.join(self.views) or '(none)'}")
        out = self.circuit.outputs[v.name]
        lines = [f"view {v.name}{' (materialized)' if v.materialized else ''}"]
        if passes and v.bound is not None:
            trace: list = []
            names = list(self.views)
            earlier = {n: self.views[n] for n in names[:names.index(v.name)]}
            optimize(v.bound, self.rules_context(earlier, v.options), trace)
            lines += ["rewrite rules:", format_trace(v.bound, trace)]
        lines += ["logical plan:", format_plan(v.plan), "incremental circuit:"]
        ids = {out.delta} | ({out.integral} if out.integral is not None else set())
        ops = {op.id: op for i in ids for op in self.circuit.upstream(i)}
        lines += ["  " + ops[i].describe() for i in sorted(ops)]
        lines.append(f"  output: changes of #{out.delta}" +
                     (f", contents in #{out.integral}" if out.integral is not None else ""))
        read = [t for t, (inp, _) in self.circuit.tables.items() if inp in ops]
        if read:   # whether each table it reads keeps its rows (an append-only table nothing reads does not)
            lines.append("tables: " + ", ".join(
                f"{t} ({'stream: not stored' if self.circuit.stream(t) else 'stored'})"
                for t in read))
        lines += describe_bounds(self.circuit, sorted(ops), event_columns(self.tables), self.gc,
                                 {v.name: self.final[v.name]} if v.name in self.final else {})
        return "\n".join(lines)


class _Parser(ReadDuckDB.Parser):
    """The dialect's parser, remembering where it failed (``fail``) or gave up on a statement and kept it
    as an opaque ``exp.Command`` (``gave_up_at``), so that errors point at the token."""

    fail = None
    gave_up_at = None

    def raise_error(self, message, token=None):
        self.fail = (token or self._curr, self._prev, message)
        return super().raise_error(message, token) if token else super().raise_error(message)

    def _parse_as_command(self, start):
        self.gave_up_at = self._curr or None
        return super()._parse_as_command(start)


@dataclass
class Statement:
    """One parsed statement of a program with its tokens (offsets into the whole program)."""

    tree: exp.Expression
    tokens: List[Token]
    event_time: Tuple[EventTimeClause, ...] = ()   # CREATE TABLE's LATENESS / WATERMARK FOR, taken out
    local: bool = False   # CREATE LOCAL VIEW (the word LOCAL taken out)
    declared: bool = False   # DECLARE RECURSIVE VIEW v (columns): read as CREATE TABLE v (columns)

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def end(self) -> int:
        """Offset just after the statement's last token."""
        return self.tokens[-1].end + 1


# Event-time words that sqlglot cannot parse.  In CREATE TABLE, Feldera's ``ts TIMESTAMP LATENESS INTERVAL
# 4 SECONDS`` and Flink's ``WATERMARK FOR ts AS ts - INTERVAL ...`` are taken out before parsing
# (planner.event_time); anywhere else (Feldera's statement ``LATENESS v.ts INTERVAL ...;``) they are errors.
EVENT_TIME_WORDS = ("LATENESS", "WATERMARK")


def check_event_time(tokens: List[Token], sql: str) -> None:
    for t in tokens:
        if t.token_type == TokenType.VAR and t.text.upper() in EVENT_TIME_WORDS:
            raise UnsupportedError(f"{t.text.upper()} is not supported yet here: declare event time on a table's "
                                   "TIMESTAMP column (ts TIMESTAMP LATENESS INTERVAL '4' SECOND, or WATERMARK FOR ts "
                                   "AS ts - INTERVAL '4' SECOND in CREATE TABLE)", sql=sql, offset=t.start)


# tokens that can start the query of CREATE VIEW ... AS
QUERY_START = (TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN, TokenType.FROM, TokenType.VALUES)


def _show(t: Token, sql: str) -> str:
    """A token as written (a string literal with its quotes), quoted."""
    text = sql[t.start:t.end + 1] if 0 <= t.start <= t.end < len(sql) else t.text
    return f"'{text}'" if not text.startswith("'") else text


def _after(t: Token) -> str:
    """How to name the token an expression should follow: keywords bare (WHERE), symbols quoted ('>')."""
    if re.fullmatch(r"[A-Za-z_ ]+", t.text) and t.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
        return t.text.upper()
    return f"'{t.text}'"


def _syntax_error(e: SqlglotParseError, p: _Parser, tokens: List[Token], semicolon: Optional[Token],
                  sql: str) -> ParseError:
    """A sqlglot parse error in SQL words, at the token where parsing failed."""
    desc = (e.errors[0].get("description") if e.errors else None) or str(e).split(". Line")[0]
    found, prev = (p.fail[0] or None, p.fail[1] or None) if p.fail else (None, None)
    if found is None and semicolon is not None:
        found = semicolon
    missing = re.match(r"Required keyword: '(\w+)' missing for", desc)
    if missing:
        what = "an expression" if missing.group(1) in ("this", "expression", "expressions") else \
            missing.group(1).replace("_", " ")
        base: Optional[str] = f"expected {what}" + (f" after {_after(prev)}" if prev else "")
    elif re.match(r"Expecting (\S+)$", desc):
        base = f"expected '{desc.split()[1]}'"
    elif desc.startswith("Invalid expression / Unexpected token"):
        base = None
    else:
        base = re.sub(r"\s*(but )?got <Token .*>", "", desc)
        base = re.sub(r"<class '(?:[\w]+\.)*(\w+)'>", lambda m: m.group(1).upper(), base)
        base = re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>", r"'\1'", base)
        base = base[:1].lower() + base[1:]
    if found is not None:
        msg = f"{base}, found {_show(found, sql)}" if base else f"unexpected {_show(found, sql)}"
        offset = found.start
    else:
        msg = "unexpected end of input" + (f": {base}" if base else "")
        offset = (prev or tokens[-1]).end + 1
    return ParseError(f"syntax error: {msg}", sql=sql, offset=offset)


def plain_message(e: Exception) -> str:
    """A sqlglot error's first line, without its ANSI highlighting and its own (internal) line and column."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split("\n")[0]
    return re.sub(r"\.?\s*Line \d+, Col: \d+\.?$", "", text).strip()


def _token_error(e: TokenError, tokenizer, sql: str) -> ParseError:
    start = getattr(getattr(tokenizer, "_core", tokenizer), "_start", None)
    cause = str(e.__cause__ or "")
    m = re.match(r"Missing (\S+) from", cause)
    if m:
        what = {"'": "string literal", '"': "quoted identifier"}.get(m.group(1), f"{m.group(1)}-quoted string")
        msg = f"unterminated {what} (no closing {m.group(1)})"
    elif start is not None and sql.startswith("/*", start):
        msg = "unterminated comment (no closing */)"
    else:
        msg = "cannot read the SQL text here"
    return ParseError(f"syntax error: {msg}", sql=sql, offset=start)


def parse_statements(sql: str) -> List[Statement]:
    """The program's statements, split at the semicolons outside strings and parsed one by one, so that
    a syntax error points at its statement and token."""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    dialect = ReadDuckDB()
    tokenizer = dialect.tokenizer()
    try:
        tokens = tokenizer.tokenize(sql)
    except TokenError as e:
        raise _token_error(e, tokenizer, sql) from None
    chunks: List[Tuple[List[Token], Optional[Token]]] = []
    current: List[Token] = []
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            if current:
                chunks.append((current, t))
            current = []
        else:
            current.append(t)
    if current:
        chunks.append((current, None))
    out = []
    for chunk, semicolon in chunks:
        chunk, event_time = strip_event_time(chunk, sql)
        for t, after in zip(chunk, chunk[1:]):   # SESSION(...): the session-window table function, not a keyword
            if t.token_type == TokenType.SESSION and after.token_type == TokenType.L_PAREN:
                t.token_type = TokenType.VAR
        chunk = match_condition_to_on(chunk)
        chunk = window_table_functions(chunk, sql)
        chunk = nested_type_spellings(chunk)
        local = len(chunk) > 2 and chunk[0].token_type == TokenType.CREATE and chunk[1].text.upper() == "LOCAL" \
            and chunk[2].text.upper() in ("VIEW", "MATERIALIZED")
        if local:   # Feldera's CREATE LOCAL VIEW: a view other views read, with no output of its own
            chunk = chunk[:1] + chunk[2:]
        declared = len(chunk) > 3 and chunk[0].text.upper() == "DECLARE" and chunk[1].text.upper() == "RECURSIVE" \
            and chunk[2].text.upper() == "VIEW"
        if declared:   # Feldera's DECLARE RECURSIVE VIEW v (a INT, ...): its columns, parsed as a table's
            first, second = chunk[0], chunk[2]
            chunk = [Token(TokenType.CREATE, "CREATE", first.line, first.col, first.start, first.end),
                     Token(TokenType.TABLE, "TABLE", second.line, second.col, second.start, second.end)] + chunk[3:]
        if chunk[0].token_type in (TokenType.VAR, TokenType.IDENTIFIER, TokenType.NUMBER, TokenType.STRING):
            check_event_time(chunk, sql)
            raise ParseError(f"syntax error: unexpected {_show(chunk[0], sql)} at the start of a statement (a program "
                             "is CREATE TABLE and CREATE [MATERIALIZED] VIEW statements)", sql=sql,
                             offset=chunk[0].start)
        p = _Parser(dialect=dialect, error_level=ErrorLevel.IMMEDIATE)
        try:
            trees = [t for t in p.parse(chunk, sql) if t is not None]
        except SqlglotParseError as e:
            check_event_time(chunk, sql)
            raise _syntax_error(e, p, chunk, semicolon, sql) from None
        for tree in trees:
            if isinstance(tree, exp.Command):
                check_event_time(chunk, sql)
                if chunk[0].token_type != TokenType.CREATE:
                    raise UnsupportedError(f"statement {chunk[0].text.upper()} in a program is not supported "
                                           "(only CREATE TABLE, CREATE [MATERIALIZED] VIEW and CREATE FUNCTION / MACRO)",
                                           sql=sql, offset=chunk[0].start)
                at = p.gave_up_at
                as_ = [i for i, t in enumerate(chunk) if t.token_type == TokenType.ALIAS]
                if as_ and as_[0] + 1 < len(chunk) and chunk[as_[0] + 1].token_type not in QUERY_START:
                    after = chunk[as_[0] + 1]
                    raise ParseError(f"syntax error: expected a query (SELECT ...) after AS, found {_show(after, sql)}",
                                     sql=sql, offset=after.start)
                if at:
                    raise ParseError(f"syntax error: unexpected {_show(at, sql)}", sql=sql, offset=at.start)
                raise ParseError("syntax error: unexpected end of input", sql=sql, offset=chunk[-1].end + 1)
            tree = empty_map_literals(aggregate_functions.as_engine_spells(tree))
            out.append(Statement(tree, chunk, event_time, local, declared))
    return out


_WINDOW_TVFS = ("TUMBLE", "HOP", "SESSION")


def _closing(tokens: List[Token], at: int) -> Optional[int]:
    """The index of the parenthesis closing the one at ``at``."""
    depth = 0
    for j in range(at, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[j].token_type, 0)
        if depth == 0:
            return j
    return None


def _split_commas(tokens: List[Token]) -> List[List[Token]]:
    parts: List[List[Token]] = [[]]
    depth = 0
    for t in tokens:
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0)
        if t.token_type == TokenType.COMMA and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def window_table_functions(tokens: List[Token], sql: str) -> List[Token]:
    """The Flink and Feldera spelling of the window table functions in the engine's: ``TABLE(TUMBLE(TABLE t,
    DESCRIPTOR(ts), size))`` -> ``TUMBLE(t, ts, size)``, and likewise HOP (slide, then size) and ``SESSION(TABLE t
    PARTITION BY k, DESCRIPTOR(ts), gap)`` -> ``SESSION(t, ts, gap, k)`` (the tokens keep their offsets)."""
    out = list(tokens)
    i = 0
    while i + 3 < len(out):
        t = out[i]
        if not (t.token_type == TokenType.TABLE and out[i + 1].token_type == TokenType.L_PAREN
                and out[i + 2].text.upper() in _WINDOW_TVFS and out[i + 3].token_type == TokenType.L_PAREN):
            i += 1
            continue
        name, outer_end, inner_end = out[i + 2], _closing(out, i + 1), _closing(out, i + 3)
        if outer_end is None or inner_end is None or inner_end + 1 != outer_end:
            i += 1
            continue
        args = _named_in_order(_split_commas(out[i + 4:inner_end]), name, sql)
        form = (f"write TABLE({name.text.upper()}(TABLE t{' PARTITION BY k' if name.text.upper() == 'SESSION' else ''}, "
                f"DESCRIPTOR(ts), INTERVAL ...)) or {TABLE_FUNCTION_FORMS[name.text.upper()]}")
        data = args[0] if args else []
        if len(args) < 3 or len(data) < 2 or data[0].token_type != TokenType.TABLE:
            raise UnsupportedError(f"this form of TABLE({name.text.upper()}(...)) is not supported: {form}", sql=sql,
                                   offset=name.start)
        keys: List[List[Token]] = []
        table = data[1:]
        split = [j for j, x in enumerate(table) if x.token_type == TokenType.PARTITION_BY]
        if split:
            keys = _split_commas(table[split[0] + 1:])
            table = table[:split[0]]
            # (the key columns follow the first argument's commas: they were split off as arguments)
        desc_at = 1
        if split:   # PARTITION BY a, b, DESCRIPTOR(ts): the keys run up to the DESCRIPTOR argument
            while desc_at < len(args) and not (args[desc_at] and args[desc_at][0].text.upper() == "DESCRIPTOR"):
                keys.append(args[desc_at])
                desc_at += 1
        desc = args[desc_at] if desc_at < len(args) else []
        if split and name.text.upper() != "SESSION" or len(desc) != 4 or desc[0].text.upper() != "DESCRIPTOR" \
                or desc[1].token_type != TokenType.L_PAREN or desc[3].token_type != TokenType.R_PAREN:
            raise UnsupportedError(f"this form of TABLE({name.text.upper()}(...)) is not supported: {form}", sql=sql,
                                   offset=(desc[0].start if desc else name.start))
        rest = args[desc_at + 1:]
        comma = Token(TokenType.COMMA, ",", name.line, name.col, name.start, name.end)
        new = [name, out[i + 3]] + table + [comma, desc[2]]
        for part in rest + keys:
            new += [comma] + part
        out[i:outer_end + 1] = new + [out[inner_end]]
        i += len(new)
    return out


# Flink's named arguments of the window table functions, in the order of the positional form
_ARGUMENT_NAMES = {"TUMBLE": ("DATA", "TIMECOL", "SIZE", "OFFSET"), "HOP": ("DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"),
                   "SESSION": ("DATA", "TIMECOL", "GAP")}


def _named_in_order(args: List[List[Token]], name: Token, sql: str) -> List[List[Token]]:
    """Flink's ``TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), SIZE => ...)`` as the positional arguments
    (a part after a named one without a name of its own, a PARTITION BY key, continues it)."""
    if not any(len(a) > 1 and a[1].token_type == TokenType.FARROW for a in args):
        return args
    order = _ARGUMENT_NAMES[name.text.upper()]
    named: Dict[str, List[Token]] = {}
    last = None
    for a in args:
        if len(a) > 1 and a[1].token_type == TokenType.FARROW:
            last = a[0].text.upper()
            if last not in order or last in named:
                raise UnsupportedError(f"argument {a[0].text} of {name.text.upper()} is "
                                       f"{'given twice' if last in named else 'not one of ' + ', '.join(order)}",
                                       sql=sql, offset=a[0].start)
            named[last] = list(a[2:])
        elif last is not None:   # (a PARTITION BY key list of DATA, split at its commas)
            comma = Token(TokenType.COMMA, ",", a[0].line, a[0].col, a[0].start, a[0].start) if a else None
            named[last] += ([comma] if comma else []) + list(a)
        else:
            raise UnsupportedError(f"positional arguments before named ones in {name.text.upper()}", sql=sql,
                                   offset=a[0].start if a else name.start)
    missing = [n for n in order if n not in named and n != "OFFSET"]
    if missing:
        raise UnsupportedError(f"{name.text.upper()} needs the argument {missing[0]}", sql=sql, offset=name.start)
    return [named[n] for n in order if n in named]


# the engine's spelling of the window table functions (for messages)
TABLE_FUNCTION_FORMS = {"TUMBLE": "TUMBLE(t, ts, INTERVAL ...)", "HOP": "HOP(t, ts, slide, size)",
                        "SESSION": "SESSION(t, ts, gap, key, ...)"}


def match_condition_to_on(tokens: List[Token]) -> List[Token]:
    """The Snowflake / Feldera spelling of an ASOF join in DuckDB's, which sqlglot parses: ``LEFT ASOF JOIN b
    MATCH_CONDITION (cond) ON keys`` -> ``ASOF LEFT JOIN b ON (cond) AND keys`` (the tokens keep their offsets,
    so errors still point into the program; a MATCH_CONDITION without a following ON is left for the parser)."""
    out = list(tokens)
    i = 0
    while i < len(out):
        t = out[i]
        if t.token_type == TokenType.VAR and t.text.upper() == "MATCH_CONDITION" and i + 1 < len(out) \
                and out[i + 1].token_type == TokenType.L_PAREN:
            depth, j = 0, i + 1
            while j < len(out):
                depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(out[j].token_type, 0)
                if depth == 0:
                    break
                j += 1
            if j + 1 < len(out) and out[j + 1].token_type == TokenType.ON:
                on = out[j + 1]
                and_ = Token(TokenType.AND, "AND", on.line, on.col, on.start, on.end)
                out[i:j + 2] = [on] + out[i + 1:j + 1] + [and_]
        if t.token_type == TokenType.ASOF and i > 0 and out[i - 1].token_type in (TokenType.LEFT, TokenType.INNER) \
                and i + 1 < len(out) and out[i + 1].token_type == TokenType.JOIN:
            out[i - 1], out[i] = out[i], out[i - 1]   # LEFT ASOF JOIN -> ASOF LEFT JOIN
        i += 1
    return out


def _view_name(stmt: exp.Create) -> str:
    return name_of(stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this)


def _references(st: Statement) -> set:
    return {name_of(t.this) for t in st.tree.expression.find_all(exp.Table) if isinstance(t.this, exp.Identifier)}


def _complete_group(name: str, pending: Dict[str, Statement], declared) -> Optional[List[str]]:
    """The declared recursive views connected to ``name`` through what they read, in the order they were
    created, when all of them are created; None while one is not."""
    group, todo = {name}, [name]
    while todo:
        for other in _references(pending[todo.pop()]):
            if other in declared and other not in group:
                if other not in pending:
                    return None
                group.add(other)
                todo.append(other)
    # (and the pending views that read the group's)
    changed = True
    while changed:
        changed = False
        for other, st in pending.items():
            if other not in group and _references(st) & group:
                refs = {r for r in _references(st) if r in declared}
                if not refs <= set(pending):
                    return None
                group |= {other} | refs
                changed = True
    return [n for n in pending if n in group]


def compile_program(sql: str, disabled_rules: Optional[frozenset] = None,
                    functions: Optional[Mapping[str, UserFunction]] = None) -> Program:
    """Parse, bind and incrementalize a program.  ``disabled_rules``: names of rewrite rules not to run
    (``{"*"}``: none); by default ``SQLENGINE_RULES`` decides (see :mod:`planner.rules.manager`).
    ``functions``: the Python functions declared in Python (``sqlengine.udf``), by name.

    >>> p = compile_program("CREATE TABLE t (a INT); CREATE VIEW v AS SELECT a + 1 AS b FROM t WHERE a > 0")
    >>> [f.name for f in p.views['v'].plan.fields]
    ['b']
    """
    prog = Program(sql, disabled_rules=disabled_rules, functions=dict(functions or {}))
    pending: Dict[str, Statement] = {}   # declared recursive views created, waiting for the views they read
    for st in parse_statements(sql):
        stmt = st.tree
        if isinstance(stmt, exp.Create) and stmt.kind in ("FUNCTION", "MACRO"):
            f = user_functions.function_def(stmt, sql, st.tokens)
            if f.name in prog.functions:
                raise BindError(f"function {f.name} is defined twice", sql=sql, offset=f.offset)
            if f.body is not None:   # a body calls the functions declared before it
                f = dataclasses.replace(f, body=user_functions.inline(f.body, prog.functions, sql))
            prog.functions[f.name] = f
        elif st.declared:
            d = table_def(stmt, sql, st.tokens, st.event_time)
            if d.name in prog.tables or d.name in prog.views or d.name in prog.declared:
                raise BindError(f"'{d.name}' is defined twice", sql=sql, offset=position_of(stmt.this))
            prog.declared[d.name] = d.fields
        elif isinstance(stmt, exp.Create) and stmt.kind == "TABLE":
            t = table_def(stmt, sql, st.tokens, st.event_time)
            if t.name == CLOCK:
                raise BindError(f"the name '{CLOCK}' is reserved for the engine's clock (NOW())", sql=sql,
                                offset=position_of(stmt.this))
            if t.name in prog.tables or t.name in prog.views:
                raise BindError(f"'{t.name}' is defined twice", sql=sql, offset=position_of(stmt.this))
            prog.tables[t.name] = t
        elif isinstance(stmt, exp.Create) and stmt.kind == "VIEW":
            if stmt.expression is None:
                raise ParseError("syntax error: unexpected end of input: expected " +
                                 ("a query (SELECT ...) after AS" if st.tokens[-1].token_type == TokenType.ALIAS
                                  else f"AS and a query after CREATE VIEW {name_of(stmt.this)}"),
                                 sql=sql, offset=st.end)
            name = _view_name(stmt)
            group = [name]
            if name in prog.declared:   # a declared recursive view: bound when every declared view it reads is
                pending[name] = st      # created, with those that read each other (planner.bind_recursive)
                group = _complete_group(name, pending, prog.declared)
                if group is None:
                    continue
            try:
                made = recursive_group([pending[n] for n in group], sql, prog) if len(group) > 1 else \
                    [view_def(stmt, sql, prog, st.tokens, local=st.local)]
            except (SqlglotParseError, TokenError) as e:   # raised while re-reading a bound expression
                raise ParseError(f"cannot compile view {name}: {plain_message(e)}", sql=sql, offset=st.start) from None
            for v in made:
                if v.name in prog.tables or v.name in prog.views:
                    raise BindError(f"'{v.name}' is defined twice", sql=sql, offset=position_of(stmt.this))
                prog.views[v.name] = v
                prog.declared.pop(v.name, None)
                pending.pop(v.name, None)
        else:
            check_event_time(st.tokens, sql)
            what = stmt.key.upper() if not isinstance(stmt, exp.Create) else f"CREATE {stmt.kind}"
            raise UnsupportedError(f"statement {what} in a program is not supported "
                                   "(only CREATE TABLE, CREATE [MATERIALIZED] VIEW and CREATE FUNCTION / MACRO)",
                                   sql=sql, offset=st.start)
    for name in prog.declared:
        if name in pending:
            waits = sorted(n for n in _references(pending[name]) if n in prog.declared and n not in pending)
            raise BindError(f"recursive view {name} reads declared view{'s' * (len(waits) > 1)} "
                            f"{', '.join(waits)}, never created", sql=sql, offset=position_of(pending[name].tree.this))
        raise BindError(f"recursive view {name} is declared but never created (CREATE VIEW {name} AS ...)", sql=sql,
                        offset=None)
    check_foreign_keys(prog.tables, sql)
    prog.circuit = incrementalize(prog.tables, prog.views)
    events = frozenset(event_columns(prog.tables))
    if prog.rules_context().enabled(share_table_state):   # the rules on the circuit
        streams = frozenset(n for n, t in prog.tables.items() if streamable(t))
        prog.circuit = share_table_state(prog.circuit, events, streams)
    if prog.rules_context().enabled(aggregate_contents):
        prog.circuit = aggregate_contents(prog.circuit, events)
    prog.circuit = stream_tables(prog.circuit, prog.tables)
    prog.gc, prog.final = closing_bounds(prog.circuit, prog.tables, prog.views)
    return prog


def _keyword_offset(tokens: Sequence[Token], words: Sequence[str], before: Optional[int] = None) -> Optional[int]:
    """Offset of the last of ``tokens`` (before offset ``before``) whose text is one of ``words``."""
    hits = [t.start for t in tokens if t.text.upper() in words and t.token_type != TokenType.STRING
            and (before is None or t.start < before)]
    return hits[-1] if hits else None


# clauses of CREATE that sqlglot keeps as flags: (argument, how it is written, its first keyword)
_CREATE_FLAGS = (("replace", "OR REPLACE", "OR"), ("exists", "IF NOT EXISTS", "IF"), ("unique", "UNIQUE", "UNIQUE"),
                 ("refresh", "REFRESH", "REFRESH"), ("concurrently", "CONCURRENTLY", "CONCURRENTLY"),
                 ("clone", "CLONE", "CLONE"))


def check_create_options(stmt: exp.Create, sql: str, tokens: Sequence[Token]) -> None:
    """Reject the clauses and options of CREATE TABLE / CREATE VIEW that the engine does not implement
    (rather than dropping them): ``WITH ('connectors' = ...)``, ``OR REPLACE``, ``TEMPORARY``, ..."""
    what = f"CREATE {stmt.kind}"
    name_at = position_of(stmt.this)
    for arg, written, word in _CREATE_FLAGS:
        if stmt.args.get(arg):
            raise UnsupportedError(f"{written} on {what} is not supported", sql=sql,
                                   offset=_keyword_offset(tokens, (word,), name_at) or tokens[0].start)
    props = stmt.args.get("properties")
    if props is None:
        return
    options = [p for p in props.expressions if type(p) is exp.Property and _option_key(p).lower() != "connectors"]
    # the options views and tables have (VIEW_OPTIONS, TABLE_OPTIONS) are checked by view_options / table_options
    known = VIEW_OPTIONS if stmt.kind == "VIEW" else TABLE_OPTIONS
    options = [p for p in options if _option_key(p).lower() not in known]
    if options:
        keys = ", ".join(p.this.sql(dialect=DIALECT) if isinstance(p.this, exp.Expression) else repr(str(p.this))
                         for p in options)
        at = position_of(options[0])
        supported = f" ({stmt.kind.lower()} options: {', '.join(sorted(set(known) | {'connectors'}))})"
        raise UnsupportedError(f"WITH (...) options on {what} are not supported yet: {keys}{supported}", sql=sql,
                               offset=_keyword_offset(tokens, ("WITH",), at) or at)
    for p in props.expressions:
        if stmt.kind == "VIEW" and (isinstance(p, exp.MaterializedProperty) or type(p) is exp.Property):
            continue
        if type(p) is exp.Property and (_option_key(p).lower() == "connectors" or _option_key(p).lower() in known):
            continue
        text = p.sql(dialect=DIALECT) or p.key.upper()
        first = text.split()[0].split("(")[0].upper()
        at = position_of(p)
        if at is None:
            at = _keyword_offset(tokens, (first, "TEMP") if first == "TEMPORARY" else (first,), name_at)
        raise UnsupportedError(f"{text} on {what} is not supported yet", sql=sql,
                               offset=at if at is not None else tokens[0].start)


# What to write instead of a rejected table constraint.
CONSTRAINT_ADVICE = {
    "UNIQUE": ": the engine does not enforce uniqueness; declare the column(s) PRIMARY KEY (an insert of an "
              "existing key then replaces its row), or drop UNIQUE",
    "CHECK": ": the engine does not check conditions on input; drop the CHECK, and filter in a view instead",
}


def _token_after(tokens: Sequence[Token], word: str, after: int) -> Optional[int]:
    """The offset of the first token ``word`` at or after offset ``after``."""
    return next((t.start for t in tokens if t.start >= after and t.text.upper().split()[:1] == [word]
                 and t.token_type != TokenType.STRING), None)


_TYPE_ENDS = {"NOT", "NULL", "PRIMARY", "UNIQUE", "CHECK", "DEFAULT", "REFERENCES", "COLLATE", "LATENESS",
              "GENERATED", "AS", "CONSTRAINT"}


def _type_text(c: exp.ColumnDef, sql: str, tokens: Sequence[Token]) -> Tuple[str, Optional[int]]:
    """A column definition's type as written, and its offset (sqlglot keeps neither): the tokens after the
    column's name, up to a constraint, or the ',' or ')' that ends the definition."""
    meta = getattr(c.this, "_meta", None)
    kind = c.args.get("kind")
    fallback = kind.sql(dialect=DIALECT) if kind is not None else "(missing)"
    if not (meta and "end" in meta):
        return fallback, position_of(c)
    depth, first, last = 0, None, None
    for t in tokens:
        if t.start <= meta["end"]:
            continue
        if depth == 0 and (t.token_type in (TokenType.COMMA, TokenType.R_PAREN) or
                           t.text.upper().split()[0] in _TYPE_ENDS):
            break
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0)
        first, last = first or t, t
    if first is None:
        return fallback, re.compile(r"\s*").match(sql, meta["end"] + 1).end()
    return sql[first.start:last.end + 1], first.start


def table_def(stmt: exp.Create, sql: str, tokens: Sequence[Token] = (),
              event_time: Sequence[EventTimeClause] = ()) -> TableDef:
    schema = stmt.this
    if not isinstance(schema, exp.Schema):
        raise UnsupportedError("CREATE TABLE without a column list is not supported", sql=sql,
                               offset=position_of(stmt))
    if tokens:
        check_create_options(stmt, sql, tokens)
    name = name_of(schema.this)
    fields, pk = [], []
    foreign: List[ForeignKey] = []
    defaults: List[Tuple[str, object, str]] = []
    after = position_of(schema.this) or 0   # elements are searched for in the text from here on
    for c in schema.expressions:
        if isinstance(c, exp.PrimaryKey):
            pk += [name_of(i) if isinstance(i, exp.Identifier) else name_of(i.this) for i in c.expressions]
            continue
        if isinstance(c, exp.ForeignKey):
            foreign.append(_foreign_key([name_of(i) for i in c.expressions], c.args.get("reference"), tokens, after,
                                        sql))
            continue
        if not isinstance(c, exp.ColumnDef):
            word = c.sql(dialect=DIALECT).split()[0].upper()
            raise UnsupportedError(f"{word} constraints are not supported{CONSTRAINT_ADVICE.get(word, '')}", sql=sql,
                                   offset=_token_after(tokens, word, after) or position_of(c))
        after = position_of(c.this) or after
        t = from_datatype(c.args["kind"]) if c.args.get("kind") else None
        if t is None:
            text, at = _type_text(c, sql, tokens)
            raise UnsupportedError(f"column type {text} is not supported; use one of "
                                   f"{', '.join(SUPPORTED_COLUMN_TYPES)}", sql=sql, offset=at)
        for cons in c.args.get("constraints") or []:
            kind = cons.args.get("kind")
            if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
                t = t.with_nullable(False)
            elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                pk.append(name_of(c.this))
            elif isinstance(kind, exp.NotNullColumnConstraint):
                pass
            elif isinstance(kind, exp.Reference):
                foreign.append(_foreign_key([name_of(c.this)], kind, tokens, after, sql))
            elif isinstance(kind, exp.DefaultColumnConstraint):
                defaults.append(_default(name_of(c.this), kind.this, t, sql, _token_after(tokens, "DEFAULT", after)))
            else:
                word = cons.sql(dialect=DIALECT).split()[0].upper()
                raise UnsupportedError(f"{word} constraints are not supported (a column may be NOT NULL or PRIMARY "
                                       f"KEY){CONSTRAINT_ADVICE.get(word, ': drop it')}", sql=sql,
                                       offset=_token_after(tokens, word, after) or position_of(cons) or after)
        fname = c.this.this if c.this.quoted else c.this.this
        if any(f.name.lower() == fname.lower() for f in fields):
            raise BindError(f"column '{fname}' is defined twice in table {name}", sql=sql, offset=position_of(c))
        fields.append(Field(fname, t))
    names = [f.name.lower() for f in fields]
    for k in pk:
        if k.lower() not in names:
            raise BindError(f"PRIMARY KEY column '{k}' is not a column of {name}. Columns: "
                            f"{', '.join(f.name for f in fields)}", sql=sql, offset=position_of(schema))
    if len(set(k.lower() for k in pk)) != len(pk):
        raise BindError(f"table {name} declares its PRIMARY KEY twice", sql=sql, offset=position_of(schema))
    # key columns are NOT NULL
    fields = [Field(f.name, f.type.with_nullable(False)) if f.name.lower() in {k.lower() for k in pk} else f
              for f in fields]
    pk_names = tuple(next(f.name for f in fields if f.name.lower() == k.lower()) for k in pk)
    lateness = table_lateness(name, fields, event_time, sql)
    options = dict(table_options(stmt, sql))
    materialized = options.get("materialized", "false") == "true"
    append_only = options.get("append_only", "false") == "true"
    if append_only and pk_names:
        raise UnsupportedError(f"table {name}: 'append_only' = 'true' and a PRIMARY KEY do not go together (an "
                               "insert of a key that exists replaces its row: a delete)", sql=sql,
                               offset=position_of(schema))
    for fk in foreign:
        for col_name in fk.columns:
            if col_name.lower() not in names:
                raise BindError(f"FOREIGN KEY column '{col_name}' is not a column of {name}", sql=sql, offset=fk.offset)
    defaults = [(next(f.name for f in fields if f.name.lower() == c.lower()), v, text) for c, v, text in defaults]
    return TableDef(name, tuple(fields), pk_names, connectors_option(stmt), lateness=lateness,
                    materialized=materialized, append_only=append_only, foreign_keys=tuple(foreign),
                    defaults=tuple(defaults))


def _default(column: str, value: exp.Expression, t, sql: str, at: Optional[int]) -> Tuple[str, object, str]:
    """A column's DEFAULT: a constant, cast to the column's type by DuckDB at compile time (an input row that
    leaves the column out gets it, on every input path).  A default that reads a column, the clock or a
    random value is rejected: it would not be one value."""
    import duckdb
    constant = (exp.Literal, exp.Neg, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Null, exp.Boolean, exp.Paren,
                exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Interval, exp.Var)
    if not all(isinstance(n, constant) for n in value.walk()):
        raise UnsupportedError(f"DEFAULT of column {column}: only a constant is supported (a literal, or a CAST of "
                               "one)", sql=sql, offset=at)
    text = value.sql(dialect=DIALECT)
    try:
        got = duckdb.sql(f"SELECT CAST({text} AS {t.sql}) AS v").fetchall()[0][0]
    except duckdb.Error as e:
        raise BindError(f"DEFAULT of column {column}: {str(e).splitlines()[0]}", sql=sql, offset=at) from None
    if got is None and not t.nullable:
        raise BindError(f"DEFAULT of column {column} is NULL, and the column is NOT NULL", sql=sql, offset=at)
    return column, got, text


def _foreign_key(columns: List[str], ref: Optional[exp.Expression], tokens: Sequence[Token], after: int,
                 sql: str) -> ForeignKey:
    at = _token_after(tokens, "REFERENCES", after)
    if ref is not None and (ref.args.get("options") or ref.args.get("expressions")):
        raise UnsupportedError("ON DELETE / ON UPDATE actions of a FOREIGN KEY are not supported (references are "
                               "recorded, not enforced: drop the action)", sql=sql, offset=at)
    target = ref.this if ref is not None else None
    table = name_of(target.this if isinstance(target, exp.Schema) else target) if target is not None else ""
    referenced = tuple(name_of(i) for i in target.expressions) if isinstance(target, exp.Schema) else ()
    return ForeignKey(tuple(columns), table, referenced, at)


def check_foreign_keys(tables: Dict[str, TableDef], sql: str) -> None:
    """Each FOREIGN KEY / REFERENCES names a table of the program and as many of its columns (or its PRIMARY
    KEY): checked at compile time, not enforced on the rows."""
    for t in tables.values():
        for fk in t.foreign_keys:
            target = tables.get(fk.table)
            if target is None:
                raise BindError(f"table {t.name} references table {fk.table}, which the program does not declare",
                                sql=sql, offset=fk.offset)
            referenced = fk.referenced or target.primary_key
            if not referenced:
                raise BindError(f"table {t.name} references table {fk.table} without naming columns, and "
                                f"{fk.table} has no PRIMARY KEY", sql=sql, offset=fk.offset)
            have = {f.name.lower() for f in target.fields}
            missing = [c for c in referenced if c.lower() not in have]
            if missing:
                raise BindError(f"table {t.name} references column '{missing[0]}', which is not a column of "
                                f"{fk.table}", sql=sql, offset=fk.offset)
            if len(referenced) != len(fk.columns):
                raise BindError(f"table {t.name}'s FOREIGN KEY has {len(fk.columns)} column(s) and references "
                                f"{len(referenced)}", sql=sql, offset=fk.offset)


def table_lateness(table: str, fields: Sequence[Field], clauses: Sequence[EventTimeClause],
                   sql: str) -> Optional[Tuple[str, int]]:
    """(the event-time column's name as in ``fields``, lateness in microseconds) of a table's LATENESS or
    WATERMARK FOR clause; at most one per table, on a TIMESTAMP column."""
    if not clauses:
        return None
    if len(clauses) > 1:
        second = clauses[1]
        raise UnsupportedError(f"table {table} declares a second event-time column ({second.kind} on "
                               f"{second.column}, after {clauses[0].kind} on {clauses[0].column}); a table has at "
                               "most one", sql=sql, offset=second.at)
    c = clauses[0]
    hits = [f for f in fields if (f.name == c.column if c.quoted else f.name.lower() == c.column.lower())]
    if not hits:
        raise BindError(f"unknown column '{c.column}' in {c.kind}. Columns of {table}: "
                        f"{', '.join(f.name for f in fields)}", sql=sql, offset=c.column_at)
    f = hits[0]
    if f.type.base != "TIMESTAMP":
        raise BindError(f"the event-time column {f.name} ({c.kind}) must be a TIMESTAMP, not {f.type.sql}",
                        sql=sql, offset=c.column_at)
    return f.name, c.lateness


VIEW_OPTIONS = {"join_order": ("optimized", "as_written"),   # option -> its values, the default first
                "emit_final": None,                          # None: any value (emit_final: a view column)
                "closed_windows": ("keep", "drop"),          # a MATERIALIZED view: keep closed windows' rows?
                "max_iterations": None}                      # a recursive query's bound (planner.bind_recursive)
TABLE_OPTIONS = {"materialized": ("false", "true"), "append_only": ("false", "true")}


def table_options(stmt: exp.Create, sql: str) -> Tuple[Tuple[str, str], ...]:
    """The ``WITH (...)`` options of a CREATE TABLE other than connectors, checked against ``TABLE_OPTIONS``."""
    props = stmt.args.get("properties")
    out = []
    for p in (props.expressions if props else ()):
        if type(p) is not exp.Property or _option_key(p).lower() not in TABLE_OPTIONS:
            continue
        key = _option_key(p).lower()
        value = p.args.get("value")
        text = value.name if isinstance(value, exp.Expression) else str(value)
        if text.lower() not in TABLE_OPTIONS[key]:
            raise UnsupportedError(f"table option '{key}' must be one of {', '.join(TABLE_OPTIONS[key])}, "
                                   f"not '{text}'", sql=sql, offset=position_of(p))
        out.append((key, text.lower()))
    return tuple(out)


def _option_key(p: exp.Expression) -> str:
    return p.this.name if isinstance(p.this, exp.Expression) else str(p.this)


def connectors_option(stmt: exp.Create) -> Optional[Tuple[str, int]]:
    """The text of a ``WITH ('connectors' = '<JSON>')`` option and the offset of its string literal (the
    connectors module checks it, so that its errors point into the JSON)."""
    props = stmt.args.get("properties")
    for p in (props.expressions if props else ()):
        if type(p) is exp.Property and _option_key(p).lower() == "connectors":
            value = p.args.get("value")
            at = position_of(value) if isinstance(value, exp.Expression) else None
            text = value.name if isinstance(value, exp.Expression) else str(value)
            return text, at if at is not None else (position_of(p) or 0)
    return None


def view_options(props: Sequence[exp.Expression], sql: str) -> Tuple[Tuple[str, str], ...]:
    """The ``WITH ('name' = 'value', ...)`` options of a CREATE VIEW, checked against ``VIEW_OPTIONS``."""
    out = []
    for p in props:
        key = _option_key(p)
        if key.lower() == "connectors":
            continue
        value = p.args.get("value")
        value = value.name if isinstance(value, exp.Expression) else str(value)
        if key.lower() not in VIEW_OPTIONS:
            raise UnsupportedError(f"view option '{key}' is not supported; view options: "
                                   f"{', '.join(sorted(VIEW_OPTIONS))}", sql=sql, offset=position_of(p))
        values = VIEW_OPTIONS[key.lower()]
        if values is None:   # a column name, checked against the view's columns by view_def
            out.append((key.lower(), value))
            continue
        if value.lower() not in values:
            raise UnsupportedError(f"view option '{key}' must be one of {', '.join(values)}, "
                                   f"not '{value}'", sql=sql, offset=position_of(p))
        out.append((key.lower(), value.lower()))
    return tuple(out)


def declared_recursive(name: str, q: exp.Expression, fields) -> exp.Expression:
    """The query of a view declared with DECLARE RECURSIVE VIEW, as ``WITH RECURSIVE name (its columns) AS
    (query) SELECT * FROM name`` (the recursive CTE takes the declared types: planner.bind_recursive)."""
    alias = exp.TableAlias(this=exp.to_identifier(name), columns=[exp.to_identifier(f.name) for f in fields])
    cte = exp.CTE(this=q, alias=alias)
    out = exp.select("*").from_(exp.Table(this=exp.to_identifier(name)))
    out.set("with_", exp.With(expressions=[cte], recursive=True))
    return out


def max_iterations_option(options, props, sql: str) -> int:
    """``WITH ('max_iterations' = 'N')``: how many iterations a recursive query of the view may take (a positive
    integer; 1000 by default)."""
    written = dict(options).get("max_iterations")
    if written is None:
        return DEFAULT_MAX_ITERATIONS
    if not written.strip().isdigit() or int(written) < 1:
        p = next(p for p in props if type(p) is exp.Property and _option_key(p).lower() == "max_iterations")
        raise BindError(f"max_iterations must be a positive integer, not '{written}'", sql=sql, offset=position_of(p))
    return int(written)


def check_closed_windows(name: str, plan, options, materialized: bool, props, prog: "Program", sql: str) -> None:
    """``'closed_windows' = 'drop'`` (a MATERIALIZED view forgets the rows the watermark closed) needs a
    materialized view with a column bounded by a watermark."""
    if dict(options).get("closed_windows") != "drop":
        return
    p = next(p for p in props if type(p) is exp.Property and _option_key(p).lower() == "closed_windows")
    if not materialized:
        raise UnsupportedError(f"closed_windows is an option of a MATERIALIZED VIEW ({name} keeps no rows)", sql=sql,
                               offset=position_of(p))
    if not node_bounds(plan, event_columns(prog.tables)):
        raise UnsupportedError(f"closed_windows = 'drop' needs a column of view {name} bounded by a watermark (a "
                               "table's LATENESS / WATERMARK FOR column, a TUMBLE / HOP window bound, ...)", sql=sql,
                               offset=position_of(p))


def emit_final_option(name: str, plan, options, props, prog: "Program", sql: str):
    """The view's options with ``emit_final`` naming the view's column as spelled in the plan; the column must
    exist and be bounded by a watermark (planner.watermarks)."""
    written = dict(options).get("emit_final")
    if written is None:
        return options
    p = next(p for p in props if type(p) is exp.Property and _option_key(p).lower() == "emit_final")
    value = p.args.get("value")
    at = position_of(value) if isinstance(value, exp.Expression) else None
    at = at if at is not None else position_of(p)
    names = [f.name for f in plan.fields]
    hits = [i for i, n in enumerate(names) if n == written] or \
        [i for i, n in enumerate(names) if n.lower() == written.lower()]
    if len(hits) != 1:
        raise BindError(f"emit_final needs a column bounded by a watermark: '{written}' is "
                        f"{'not a column' if not hits else 'an ambiguous column name'} of view {name}. "
                        f"Columns: {', '.join(names)}", sql=sql, offset=at)
    terms = node_bounds(plan, event_columns(prog.tables)).get(hits[0])
    if terms is None:
        raise UnsupportedError(f"emit_final needs a column bounded by a watermark: column {names[hits[0]]} of view "
                               f"{name} is not (bounded columns are a table's LATENESS / WATERMARK FOR column, "
                               "passed through projections, filters, unions, GROUP BY keys, equi-join keys and "
                               "TUMBLE / HOP window bounds)", sql=sql, offset=at)
    return tuple((k, names[hits[0]] if k == "emit_final" else v) for k, v in options)


def renamed(bound: Node, names: List[str], column_list: Sequence[exp.Expression], view: str, sql: str
            ) -> Tuple[Node, List[str]]:
    """The view's plan with its columns named by the view's column list, which names each of them once."""
    new = [name_of(c) for c in column_list]
    if len(new) != len(names):
        raise BindError(f"view {view} names {len(new)} column{'s' if len(new) != 1 else ''} but its query gives "
                        f"{len(names)}", sql=sql, offset=position_of(column_list[0]))
    seen = set()
    for c, n in zip(column_list, new):
        if n.lower() in seen:
            raise BindError(f"column {n} is named twice in view {view}'s column list", sql=sql, offset=position_of(c))
        seen.add(n.lower())
    plan = Project(bound, tuple(Expr(col(i), f.type) for i, f in enumerate(bound.fields)), tuple(new))
    return plan, new


@dataclass
class _ViewQuery:
    """A CREATE VIEW's parts, its query prepared for binding (functions inlined, NOW() read from the clock, the
    query forms rewritten, checked for what the engine does not honour)."""
    name: str
    column_list: Optional[list]
    props: Optional[exp.Expression]
    materialized: bool
    options: Tuple[Tuple[str, str], ...]
    q: exp.Expression


def _view_query(stmt: exp.Create, sql: str, prog: Program, tokens: Sequence[Token] = ()) -> _ViewQuery:
    column_list = list(stmt.this.expressions) if isinstance(stmt.this, exp.Schema) else None
    name = name_of(stmt.this.this if column_list is not None else stmt.this)
    props = stmt.args.get("properties")
    materialized = bool(props and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions))
    if tokens:
        check_create_options(stmt, sql, tokens)
    options = view_options([p for p in props.expressions if type(p) is exp.Property], sql) if props else ()
    if props and any(not isinstance(p, exp.MaterializedProperty) and type(p) is not exp.Property
                     for p in props.expressions):
        raise UnsupportedError("view properties", sql=sql, offset=position_of(props))
    q = user_functions.inline(stmt.expression, prog.functions, sql)   # SQL functions' bodies; Python calls' casts
    q, uses_clock = rewrite_now(q)
    if uses_clock:   # NOW(): a read of the clock table (planner/clock.py), which the program gets with its first use
        prog.tables.setdefault(CLOCK, clock_table())
    bad = nondeterministic_call(q, sql, tokens)
    if bad is not None:
        raise UnsupportedError(f"non-deterministic function {bad[0]} is not supported in a view: its value would "
                               "differ between a row's insert and its delete", sql=sql, offset=bad[1])
    q = query_forms.rewrite(q, sql)   # named windows, VALUES in FROM, SEMI / ANTI JOIN
    check_parsed(q, sql)
    # ORDER BY without LIMIT or OFFSET does not change a view's contents (a bag); drop it.
    if isinstance(q, (exp.Select, exp.Union)) and q.args.get("order") is not None and q.args.get("limit") is None \
            and q.args.get("offset") is None:
        q = q.copy()
        q.set("order", None)
    return _ViewQuery(name, column_list, props, materialized, options, q)


def _binder(prog: Program, sql: str, vqs: Sequence[_ViewQuery]) -> Binder:
    binder = Binder(sql, prog.tables, prog.views, user_functions.python_names(prog.functions))
    binder.max_iterations = max(max_iterations_option(vq.options, vq.props.expressions if vq.props else (), sql)
                                for vq in vqs)
    binder.declared = dict(prog.declared)
    return binder


def recursive_group(statements: Sequence[Statement], sql: str, prog: Program) -> List[ViewDef]:
    """The views of a group declared with DECLARE RECURSIVE VIEW that read each other: one :class:`Recursive`
    node for all (``planner.bind_recursive``), each view the rows of its relation."""
    vqs = [_view_query(st.tree, sql, prog, st.tokens) for st in statements]
    node = _binder(prog, sql, vqs).bind_recursive_group(
        [(vq.name, vq.q, None, prog.declared[vq.name]) for vq in vqs], {})
    out = []
    for i, (st, vq) in enumerate(zip(statements, vqs)):
        picked = Filter(node, Expr(f"c0 = {i}", BOOLEAN))
        cols = node.columns[i]
        plan = Project(picked, tuple(Expr(col(k), f.type) for k, f in zip(node.slots(i), cols)),
                       tuple(f.name for f in cols))
        out.append(view_def(st.tree, sql, prog, st.tokens, local=st.local, bound=(plan, [f.name for f in cols])))
    return out


def view_def(stmt: exp.Create, sql: str, prog: Program, tokens: Sequence[Token] = (), local: bool = False,
             bound=None) -> ViewDef:
    """A CREATE VIEW bound and optimized (``bound``: its plan and column names already bound, for the views of a
    recursive group)."""
    vq = _view_query(stmt, sql, prog, tokens)
    name, column_list, props, materialized, options, q = (vq.name, vq.column_list, vq.props, vq.materialized,
                                                          vq.options, vq.q)
    binder = _binder(prog, sql, [vq])
    if bound is not None:
        bound, names = bound
    else:
        if name in prog.declared:   # DECLARE RECURSIVE VIEW name (...): the view is WITH RECURSIVE name AS (query)
            q = declared_recursive(name, q, prog.declared[name])
        bound, names = binder.bind_query(q, {})
    if column_list is not None:   # CREATE VIEW v (a, b) AS ...: the columns renamed, in order
        bound, names = renamed(bound, names, column_list, name, sql)
    check_column_types(name, bound, tuple(names), binder.origins, sql, position_of, position_of(q))
    plan = optimize(bound, prog.rules_context(options=options))
    options = emit_final_option(name, plan, options, props.expressions if props else (), prog, sql)
    check_closed_windows(name, plan, options, materialized, props.expressions if props else (), prog, sql)
    if local and (materialized or connectors_option(stmt) is not None):
        raise UnsupportedError(f"a LOCAL view has no output, so view {name} cannot be "
                               f"{'MATERIALIZED' if materialized else 'given connectors'} (drop LOCAL)",
                               sql=sql, offset=position_of(stmt.this))
    return ViewDef(name, plan, materialized, q.sql(dialect=DIALECT), bound, options, connectors_option(stmt),
                   local=local)
