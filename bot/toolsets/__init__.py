"""The tools, one declaration each (`declare.py`), grouped in toolsets by resource family
and registered by the composition root (`bot/app.py`). Nothing here imports a higher layer:
the pipeline that runs a call lives in `bot/pipeline/`."""
