"""The typed keys under which the app holds its config, metrics and engine: the one module every route
module imports to reach them (app.py only assembles)."""

from aiohttp import web

from streamer.realtime.metrics import DaemonMetrics
from web.daemon_config import DaemonConfig
from web.engine import DaemonEngine

METRICS_KEY = web.AppKey("metrics", DaemonMetrics)
ENGINE_KEY = web.AppKey("engine", DaemonEngine)
CONFIG_KEY = web.AppKey("config", DaemonConfig)
