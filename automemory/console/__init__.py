"""The memory console: server-rendered pages over the same services and selectors as the API."""
