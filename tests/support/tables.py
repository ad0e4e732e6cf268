"""Reading the rich tables the CLI prints, as a user reads them: by title and cell."""

from __future__ import annotations


def table_rows(output: str, title: str) -> list[list[str]]:
    """The body rows of the rich table printed under ``title`` (its cells, stripped)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    rows: list[list[str]] = []
    for line in lines[start + 4:]:  # title, top border, header, rule
        if not line.startswith("│"):
            break
        rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows
