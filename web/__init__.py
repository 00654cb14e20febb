"""The aiohttp daemon: assembly (app.py), settings, engine, and one module per route family."""
