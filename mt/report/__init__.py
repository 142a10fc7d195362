"""`mt report`: runs compared from their run folders alone: the runs loaded (runs.py), seeds as groups
(groups.py), learning curves (curves.py), and the Markdown report with its significance (markdown.py)."""
