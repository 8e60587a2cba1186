"""The pages: the status page (a file next to this module, served at `/`), the login
form, and the Content-Security-Policy that allows exactly each page's own inline code.

The page also takes `/#token=TOKEN`: its script posts the fragment (never sent to the
server in the URL) to `/login`.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import re


def load_page() -> str:
    """The status page (package data of ftrl.coordinator.http)."""
    return importlib.resources.files("ftrl.coordinator.http").joinpath("status_page.html").read_text("utf-8")


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>ftrl coordinator: log in</title>
<style>
body{font:15px system-ui,sans-serif;margin:4em auto;max-width:28em;color:#222}
input{font:inherit;padding:.4em;width:100%;box-sizing:border-box;margin:.5em 0}
button{font:inherit;padding:.4em 1.2em}.err{color:#b00}
</style></head><body>
<h1>ftrl coordinator</h1>
<p>This page needs the cluster token (the coordinator's <code>--token-file</code>, or the
token file it names in its log).</p>
<p class="err" id="err">__ERROR__</p>
<form method="post" action="/login">
<label>Cluster token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Log in</button></form>
<script>
(function () {
  var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  fetch("/login", {method: "POST", credentials: "same-origin", redirect: "manual",
    headers: {"Content-Type": "application/x-www-form-urlencoded"},
    body: "token=" + m[1]}).then(function () { location.replace("/"); },
    function () { document.getElementById("err").textContent = "login failed"; });
})();
</script></body></html>
"""


def csp(page: str) -> str:
    """A Content-Security-Policy allowing exactly the page's own inline style and script."""
    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'"
                        for b in blocks)

    return (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
            "connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
            "frame-ancestors 'none'")
