"""`compare.py eval`: repeated trials of the graded scenarios, pass^k per scenario and contender.

`grading` judges each run's outcome (success, safe or unsafe failure), `trials` runs the trials and builds the
JSON document, `report` renders its tables and page.
"""
