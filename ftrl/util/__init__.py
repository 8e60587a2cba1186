"""Small helpers with no ftrl dependencies: files, backoff, processes, asyncio."""
