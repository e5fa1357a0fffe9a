"""Extraction: completed, idle tasks become project memories, one phase per module.

`sweep` runs the pipeline and calls the phases in this order; each phase is handed what the
ones before it computed, on the task's `Candidate`:

- `lease`, `cursor`    one sweeper at a time, and where the last sweep left off;
- `candidates`         the tasks to look at, each read once with everything the phases need;
- `retraction`         a memory whose task saw external context since is withdrawn;
- `gates`              switch, idle, duration and length, external context, quota;
- `drafting`           the memory's text: `model` (the extraction model) or `deterministic`;
- `privacy`            no user-level memory's text in a project memory (and consent);
- `consolidation`      how the memory joins the project's memories (the consolidation model);
- `writing`            the memory, its provenance and its log row, in one transaction;
- `log`                every task's verdict in the extraction log, and the sweep's summary.

Shared helpers live next to the package: `services.text` (cleaning texts and keywords, the
goal key), `services.provenance` (fingerprints of injected and private memories),
`services.llm` (the model client) and `services.redactor`.
"""
