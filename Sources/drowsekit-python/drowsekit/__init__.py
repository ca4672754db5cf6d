"""DrowseKit for Python: a Drowse app's connection to drowsed, standard library only.

Blocking::

    from drowsekit import DrowseApp, Result
    app = DrowseApp()                       # DROWSE_APP, DROWSE_SOCKET (drowsed sets both)
    for event in app.events():              # reconnects when drowsed restarts
        app.complete(event, Result.NEW_DATA)

asyncio: ``from drowsekit.aio import AsyncDrowseApp`` (the same calls, awaited).
"""

from .client import DrowseApp, EventStream
from .errors import DrowseConnectionError, DrowseError, DrowseProtocolError
from .models import (
    FETCH, FINISHED_STATES, NOTIFICATION, TASK_EXPIRING, TRANSFERS, AppStatus, BackgroundTask, Event, Result, Transfer,
)

__version__ = "0.1.0"

__all__ = [
    "DrowseApp", "EventStream", "DrowseError", "DrowseConnectionError", "DrowseProtocolError",
    "AppStatus", "BackgroundTask", "Event", "Result", "Transfer",
    "FETCH", "NOTIFICATION", "TRANSFERS", "TASK_EXPIRING", "FINISHED_STATES",
]
