"""`python -m rl.report RUN_OR_FOLDER... --output report/`: compare runs that train.py wrote.

Learning curves with bootstrap bands, rliable's aggregates (IQM, median, mean with stratified-bootstrap intervals,
performance profiles, probability of improvement, Atari's human-normalised score) and each run's final and best score
beside the published reference, in one `index.html`, a `summary.json` and the runs table as `runs.csv`.
Files: runs.py reads folders, lines.py groups copies, stats.py computes, scores.py holds the published tables, plots.py
draws, page.py writes the page, build.py ties them.
matplotlib and rliable are imported only while a report is written.
"""

from rl.report.build import write_report  # noqa: F401
