"""`mt serve`: a run behind HTTP. app.py is the HTTP API and the attention explorer page (static/),
worker.py the one decoding thread behind it, limits.py what a request may ask."""
