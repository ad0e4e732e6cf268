"""The operators' read models of the ledger: what `call show`, `tasks`, the console and the
webhooks read, kept apart from the write flows so a change to a listing never touches the
rules that decide a call's next state (issue 31)."""
