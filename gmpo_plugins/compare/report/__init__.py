"""What the results of a comparison become.

stats.py       means, paired differences and their intervals, verdicts
summary.py     per-loss summaries of the runs' metric records
claims.py      the paper's claims tested on the summaries
plots.py       PNG plots, one line per loss
writer.py      terminal tables, metrics.jsonl and report.md
guide.py       the reading guide at the end of report.md
outdir.py      the report folder: what is written there, the overwrite rule, INCOMPLETE
"""
