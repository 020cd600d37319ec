"""The JVM options of every Spark driver the tests start, and a class-data archive they share.

A test's Spark lives for seconds (a killed driver) to one pytest worker's run: most of its CPU
goes into starting up and into JIT compiling code that runs a few times. The C1 compiler alone
and the serial collector halve it (a local start 16 -> 9 CPU s, a few small jobs 36 -> 16), and a
dynamic class-data-sharing archive of the classes a streaming query loads (dumped once per
clone, about 180 MB under ``.work/jvm``) takes another ~40% off every start (start 8 -> 5 CPU s,
the jobs 7.5 -> 4), since a JVM then maps Spark's classes instead of loading and verifying them.

``configure`` (from ``pytest_configure``; the xdist controller starts the archive's dump in the
background, and the JVMs started before it is done run without it) sets ``PYSPARK_SUBMIT_ARGS``
unless the environment has its own: the session's
SparkSession reads it, and so does every driver, Spark Connect server and ``seo`` process a test
starts, through the environment they inherit. A JVM that cannot use the archive (another JDK, a
changed classpath) runs without it; its warnings go to stderr, never into a CLI's JSON output.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable -Xlog:all=warning:stderr"

# a batch query, a streaming one through files and one through foreachBatch, as the tests run
# them: their classes go in;
# the JVM writes the archive as it exits, so the job waits for it
_DUMP_JOB = """
import shutil, tempfile
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
out = tempfile.mkdtemp()
spark.range(100).selectExpr("id", "id % 3 AS p").write.partitionBy("p").parquet(out + "/a")
spark.range(10).write.csv(out + "/csv")
spark.read.parquet(out + "/a").groupBy("p").count().collect()
q = spark.readStream.schema("id LONG, p LONG").parquet(out + "/a").writeStream.format("parquet")
q.option("checkpointLocation", out + "/c").trigger(availableNow=True).start(out + "/b").awaitTermination()
def each(df, batch_id):  # the sink's way: foreachBatch, a Python function called back per batch
    df.write.mode("append").parquet(out + "/e")
q = spark.readStream.schema("id LONG").option("maxFilesPerTrigger", 1).csv(out + "/csv").writeStream.foreachBatch(each)
q.option("checkpointLocation", out + "/d").trigger(availableNow=True).start().awaitTermination()
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()
jvm.wait(timeout=600)
shutil.rmtree(out, ignore_errors=True)
"""
_dumping: subprocess.Popen[bytes] | None = None


def archive_path() -> Path | None:
    """Where this clone keeps the archive of this JDK and this PySpark (None: no java)."""
    java = shutil.which("java")
    if java is None:
        return None
    import pyspark

    real = os.path.realpath(java)
    stat = os.stat(real)
    key = hashlib.sha256(f"{real}:{stat.st_size}:{stat.st_mtime_ns}:{pyspark.__version__}:{_DUMP_JOB}".encode()).hexdigest()[:16]
    return ROOT / ".work" / "jvm" / f"spark-{pyspark.__version__}-{key}.jsa"


def _temp(path: Path) -> Path:
    """This run's own name for the dump (two runs of one checkout never write one file)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _start_dump(path: Path) -> subprocess.Popen[bytes]:
    """One small Spark job in the background whose JVM writes the archive, under a temporary
    name that ``_publish`` renames: a JVM never maps half an archive."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opts = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable -XX:ArchiveClassesAtExit={_temp(path)}"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-java-options '{opts}' pyspark-shell"}
    return subprocess.Popen([sys.executable, "-c", _DUMP_JOB], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _publish(path: Path) -> None:
    """The dumped archive in place, and the archives of other JDKs, PySparks or dump jobs gone."""
    if _temp(path).exists():
        os.replace(_temp(path), path)
        for old in path.parent.glob("spark-*.jsa"):
            if old != path:
                old.unlink(missing_ok=True)


def configure(*, controller: bool, dump: bool = True) -> None:
    """Point every Spark of this run at the flags and the archive. The controller (xdist's, or
    the only process) dumps a missing archive in the background (``dump``): the JVMs started
    before it is there run without it (a JVM given no archive file runs as if given none)."""
    global _dumping
    if "PYSPARK_SUBMIT_ARGS" in os.environ:
        return
    flags = FLAGS
    path = archive_path()
    if path is not None:
        flags += f" -XX:SharedArchiveFile={path}"
        if controller and dump and not path.exists():
            _dumping = _start_dump(path)
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options '-Dlog4j2.level=ERROR {flags}' pyspark-shell"


def poll() -> None:
    """Publish the archive once its dump is done (the controller calls it as tests finish)."""
    global _dumping
    if _dumping is not None and _dumping.poll() is not None:
        path = archive_path()
        if path is not None:
            if _dumping.returncode == 0:
                _publish(path)
            _temp(path).unlink(missing_ok=True)  # a failed or killed dump's leftover
        _dumping = None


def finish() -> None:
    """At the end of the run: let the dump end (an archive is of use only whole), for the next run."""
    if _dumping is not None:
        try:
            _dumping.wait(timeout=600)
        except subprocess.TimeoutExpired:
            _dumping.kill()
            _dumping.wait()
    poll()
