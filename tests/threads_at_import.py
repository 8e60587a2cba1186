"""A module that starts a thread when it is imported (a preload that makes forking its
importer unsafe: the fork server must refuse)."""

from __future__ import annotations

import threading

_stop = threading.Event()
threading.Thread(target=_stop.wait, name="started-at-import", daemon=True).start()
