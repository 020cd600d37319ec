"""A batch made to fit its table's schema, before anything of it is written.

The table's rules (``table.schema_rules``) tell the sink, for a batch that fits: which columns
it has narrower than the table's (cast up), which nullable columns it lacks (written as nulls),
which it adds (written nullable, as the table records them) and whether its columns are in
another order (CSV files are read by position). ``conformer``
turns that into one projection of the batch, so that every file of the table has the table's
columns and types - what lets Spark read the table without being told its schema. Applied to
Spark DataFrames here (``ExactlyOnceSink``) and to Arrow tables in the tasks of a dataset group
(``conform_arrow``), whose tables may each have their own schema.

At ``start`` the same judgement is made on the stream's schema, before the query runs, so that
a notebook user learns at once, not at the first batch (``BatchSink._check_start_schema``;
``commit.table_schema.read_only_schema`` where the sink does not hold the table yet).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..table.schema_rules import Verdict

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def conformer(verdict: Verdict) -> Callable[[DataFrame], DataFrame]:
    """A function giving a batch the table's columns, order and types (identity if it has them)."""
    if not verdict.needs_alignment:
        return lambda df: df
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    target = StructType.fromJson(json.loads(verdict.schema))
    casts = set(verdict.casts)
    added = set(verdict.added)

    def fit(df: DataFrame) -> DataFrame:
        have = {f.name: f for f in df.schema.fields}
        columns = []
        for f in target.fields:
            if f.name not in have:
                columns.append(F.lit(None).cast(f.dataType).alias(f.name))
            elif f.name in casts:
                columns.append(F.col(_quoted(f.name)).cast(f.dataType).alias(f.name))
            elif f.name in added and not have[f.name].nullable:
                columns.append(nullable(F.col(_quoted(f.name))).alias(f.name))
            else:
                columns.append(F.col(_quoted(f.name)))
        return df.select(*columns)

    return fit


def nullable(column: Any) -> Any:
    """``column``, declared nullable in the files Spark writes. Spark writes a column as Parquet
    ``required`` whenever its plan proves it non-null, and simplifies away any null-producing
    expression it can evaluate (``CASE WHEN x IS NULL ...`` on a non-null ``x``); a condition on
    the (nondeterministic) partition id it cannot, and it costs one comparison a row."""
    from pyspark.sql import functions as F

    return F.when(F.spark_partition_id() >= 0, column)


def conform_arrow(data: pa.Table, schema_json: str, *, leave_out: Sequence[str] = ()) -> pa.Table:
    """``data`` with the columns of the Spark schema ``schema_json`` in its order (but those in
    ``leave_out``: partition columns, which are directories): cast where its type differs,
    nulls where it lacks one. For a dataset group's task, after the rules said it fits."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructType

    target = StructType.fromJson(json.loads(schema_json))
    arrays: list[Any] = []
    fields: list[Any] = []
    for f in target.fields:
        if f.name in leave_out:
            continue
        arrow_type = to_arrow_type(f.dataType)
        if f.name in data.column_names:
            column = data[f.name]
            arrays.append(column if column.type == arrow_type else column.cast(arrow_type))
        else:
            arrays.append(pa.nulls(data.num_rows, arrow_type))
        fields.append(pa.field(f.name, arrow_type, nullable=True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
