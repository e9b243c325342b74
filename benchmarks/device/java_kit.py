"""The Java halves of the device kit: a Java runtime and Neo4j 5.26's classes, or ArcadeDB's,
small enough to carry to a lent GPU machine, which has 16 cores but no Java and no network. With
them, issue 37's figures that need Java are taken there: Neo4j's import tool core by core, the
server's start and its constraints and indexes (`run.sh neo4j`); ArcadeDB's GraphImporter core by
core, which decides the default server's full-dump time (`run.sh arcadedb`).

    python benchmarks/device/java_kit.py pack OUT     # OUT/neo4j-runtime.tar.xz, OUT/manifest.txt
    python benchmarks/device/java_kit.py pack --server arcadedb OUT   # OUT/arcadedb-runtime.tar.xz
    python benchmarks/device/java_kit.py unpack [--server arcadedb] OUT DIR   # DIR/jre, DIR/lib, DIR/classpath.txt

Why it is built and not downloaded: the test server's classpath (tools/neo4j-test-server, from
Maven Central) is 128 MB of jars for 212 artifacts, and a JDK another ~100 MB; a device call
carries 64 MiB with the working tree. So ``pack`` runs, here, what the device will run (a bulk
load's import files through ``neo4j-admin database import full`` at one and two threads, then
the server on the imported database with kgprobe's schema, `bench_neo4j_import.py --schema`)
with the JVM's class-load log on, and keeps what was loaded: the jars classes came from (each
rewritten uncompressed, so that xz compresses their classes together: `stored`) and a runtime of the
JDK modules they came from plus a fixed safety set, made by ``jlink`` (~18 MB). It then unpacks
the archive into a fresh directory and runs the same benchmark again on it alone, with no
``java`` on PATH (`tests/neo4j_server.ENV_RUNTIME`): a class the device would miss fails here.

ArcadeDB's half is made the same way from the managed server's own jars (the ``arcadedb-embedded``
wheel, 32 MB; its JRE, Java 25, is 64 MB and has no jmods): what GraphImporter loads while it
imports a realistic dump's files at one and two cores (``bench_graphimporter_heap.py``), and a
runtime linked by a JDK of the wheel's Java line or newer (ArcadeDB's classes need Java 21+; a
JDK 25 links from its own run-time image, without jmods). The GPU image has no cp312 wheel of
``arcadedb-embedded`` to install, so this is how GraphImporter reaches it.

What it cannot promise: a code path the check did not take (an import error, a multi-line field)
may need a class it left out; the device's log would then name it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from neo4j_server import ENV_RUNTIME, build, java_major, runtime  # noqa: E402

ARCHIVES = {"neo4j": "neo4j-runtime.tar.xz", "arcadedb": "arcadedb-runtime.tar.xz"}
#: the Java line ArcadeDB's classes are compiled for (26.10: class files of Java 21)
ARCADEDB_JAVA = 21
#: JDK modules kept whatever the log says: classes from the JVM's shared archive (CDS) are logged
#: without their module, and these are what Neo4j's own start-up scripts are known to need
SAFETY_MODULES = ("java.base", "java.logging", "java.management", "java.naming", "java.sql",
                  "java.xml", "java.desktop", "jdk.unsupported", "jdk.management", "jdk.jfr",
                  "jdk.management.jfr", "jdk.crypto.ec", "jdk.zipfs", "jdk.localedata")
_LOADED = re.compile(r"source: (?:jrt:/([\w.]+)|file:(\S+\.jar))")


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"java_kit: {' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


def import_files(work: Path, entities: int) -> Path:
    """A realistic dump's bulk import files (no server is reached: the URI only says Neo4j)."""
    dump = work / "dump.json"
    run([sys.executable, str(ROOT / "benchmarks" / "gen_dump.py"), str(dump), "--realistic",
         "--entities", str(entities), "--seed", "0"])
    files = work / "imp"
    env = {**os.environ, "NEO4J_URI": "bolt://127.0.0.1:9", "NEO4J_PASSWORD": "unused",
           "KGPROBE_HOME": str(work / "home")}
    run([sys.executable, "-c", "from kgprobe.cli import main; main()", "ingest", str(dump),
         "--bulk", str(files), "--workers", "2", "--json"], env=env)
    return files


def bench(files: Path, work: Path, env: dict[str, str]) -> str:
    """The device's Neo4j step at its smallest: the import at 1 and 2 threads, then the schema."""
    return run([sys.executable, str(ROOT / "benchmarks" / "bench_neo4j_import.py"), "--files",
                str(files), "--threads", "1,2", "--gc", "default", "--schema", "--tmp", str(work)],
               env=env)


def bench_arcadedb(files: Path, env: dict[str, str], runtime: Path | None = None) -> str:
    """The device's ArcadeDB step at its smallest: GraphImporter (with its sorted index builds)
    pinned to 1 and then 2 cores, on the wheel's runtime or on ``runtime``."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_graphimporter_heap.py"), "--files", str(files),
           "--heaps", "1g", "--cores", "1,2"]
    out = run(cmd + (["--runtime", str(runtime)] if runtime is not None else []), env=env)
    if '"completed": false' in out or '"completed": true' not in out:
        raise SystemExit(f"java_kit: GraphImporter did not complete:\n{out[-3000:]}")
    return out


def wheel_classpath() -> list[str]:
    """The managed server's jars (the wheel's), in name order: the kit's classpath keeps it."""
    from kgprobe.graph.server import _package_dir  # the wheel, this machine's only

    return [str(p) for p in sorted((_package_dir() / "jars").glob("*.jar"))]


def jlink_for(major: int) -> str:
    """A `jlink` of a JDK of Java ``major`` or newer: on PATH, else under /usr/lib/jvm."""
    found = [shutil.which("jlink"), *sorted(str(p) for p in Path("/usr/lib/jvm").glob("*/bin/jlink"))]
    for jlink in found:
        if jlink and (java_major(str(Path(jlink).with_name("java"))) or 0) >= major:
            return jlink
    raise SystemExit(f"java_kit pack: no jlink of a JDK {major}+ (on PATH or in /usr/lib/jvm)")


def loaded(logs: list[Path]) -> tuple[set[str], set[str]]:
    """The JDK modules and the jar files that classes were loaded from, in these logs."""
    modules: set[str] = set()
    jars: set[str] = set()
    for log in logs:
        for m in _LOADED.finditer(log.read_text(encoding="utf-8", errors="replace")):
            if m.group(1):
                modules.add(m.group(1))
            else:
                jars.add(m.group(2))
    return modules, jars


def stored(jar: Path, to: Path) -> None:
    """``jar`` rewritten uncompressed, every entry as it was and in its order. Why: xz then
    compresses its classes together (78 MB of jars: ~29 MB, against ~45 MB for the jars as they
    are), and the archive stays one file a jar (unpacked class by class it was 37,000 files,
    whose creation took 22-32 s of system time on this machine's file system)."""
    to.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(jar) as src, zipfile.ZipFile(to, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)  # before its compression is changed: read decompresses by it
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, data)


def pack(out: Path, entities: int, server: str = "neo4j") -> None:
    arcadedb = server == "arcadedb"
    if arcadedb:
        classpath = wheel_classpath()
        jlink = jlink_for(ARCADEDB_JAVA)
    else:
        if runtime() is not None:
            raise SystemExit(f"java_kit pack: unset {ENV_RUNTIME} (the kit is made from Maven's classpath)")
        classpath = build()  # Maven's, as the test suite builds it
        jlink = jlink_for(17)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kgprobe-java-kit-") as tmp:
        work = Path(tmp)
        files = import_files(work, entities)
        logs = work / "logs"
        logs.mkdir()
        traced = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={logs}/%p.txt"}
        if arcadedb:
            bench_arcadedb(files, traced)
        else:
            bench(files, work, traced)
        modules, used = loaded(sorted(logs.iterdir()))
        kept = [p for p in classpath if p in used]  # the classpath's order: the first class wins
        if not kept or not modules:
            raise SystemExit("java_kit pack: the class-load logs name no jar (did the JVM run?)")
        stage = work / "stage"
        run([jlink, "--add-modules", ",".join(sorted(modules | set(SAFETY_MODULES))),
             "--include-locales=en", "--strip-debug", "--no-man-pages", "--no-header-files",
             "--output", str(stage / "jre")])
        names: list[str] = []
        for jar in kept:
            name = Path(jar).name.removesuffix(".jar")
            while name in names:  # two artifacts of one name: both kept, in order
                name += "_"
            names.append(name)
            stored(Path(jar), stage / "lib" / f"{name}.jar")
        (stage / "classpath.txt").write_text("".join(f"lib/{n}.jar\n" for n in names), encoding="utf-8")
        archive = out / ARCHIVES[server]
        run(["tar", "-C", str(stage), "-I", "xz -T0 -6", "-cf", str(archive), "jre", "lib", "classpath.txt"])
        # the check: the archive alone, unpacked afresh, no java on PATH
        check = work / "check"
        unpack(out, check, server)
        bare = work / "no-java"  # a PATH with no java: what the check may run besides the kit
        bare.mkdir()
        for tool in ("taskset",):
            if found := shutil.which(tool):
                (bare / tool).symlink_to(found)
        env = {**os.environ, "PATH": str(bare)}
        env.pop("JAVA_HOME", None)
        if arcadedb:
            checked = bench_arcadedb(files, env, check)
            how = "bench_graphimporter_heap.py --cores 1,2 --runtime"
        else:
            checked = bench(files, work, {**env, ENV_RUNTIME: str(check)})
            how = "bench_neo4j_import.py --threads 1,2 --schema"
        java = str(check / "jre" / "bin" / "java")
        manifest = [
            f"archive {archive.name}: {archive.stat().st_size} bytes",
            f"java {java_major(java)} (jlink of {jlink}): {' '.join(sorted(modules | set(SAFETY_MODULES)))}",
            f"jars {len(kept)} of the classpath's {len(classpath)}:",
            *(f"  {Path(j).name}" for j in kept),
            f"checked here from the archive alone ({how}):",
            *(f"  {ln}" for ln in checked.strip().splitlines()),
        ]
        (out / "manifest.txt").write_text("\n".join(manifest) + "\n", encoding="utf-8")
    print(f"java_kit: {archive} ({archive.stat().st_size / 2**20:.1f} MiB), {len(kept)} jars, "
          f"{len(modules | set(SAFETY_MODULES))} modules; checked from the archive alone")


def unpack(kit: Path, into: Path, server: str = "neo4j") -> None:
    """The archive of ``pack`` into ``into`` (made afresh): the directory `ENV_RUNTIME` names
    (Neo4j's), or ``bench_graphimporter_heap.py --runtime`` (ArcadeDB's)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    run(["tar", "-C", str(into), "-I", "xz -T0", "-xf", str(kit / ARCHIVES[server])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pack", help="make OUT/<server>-runtime.tar.xz here (neo4j: Java 17+, Maven; "
                                     "arcadedb: the managed server's wheel and a JDK 21+; both: jlink)")
    p.add_argument("out", type=Path)
    p.add_argument("--entities", type=int, default=2000, help="the check's realistic dump")
    u = sub.add_parser("unpack", help="unpack KIT's archive into DIR")
    u.add_argument("kit", type=Path)
    u.add_argument("into", type=Path)
    for q in (p, u):
        q.add_argument("--server", choices=sorted(ARCHIVES), default="neo4j", help="whose classes")
    args = ap.parse_args()
    if args.what == "pack":
        pack(args.out, args.entities, args.server)
    else:
        unpack(args.kit, args.into, args.server)


if __name__ == "__main__":
    main()
