"""What a person reads: the terminal, Markdown and HTML reports, `show`, exports, the
progress bar, `doctor`; and the escaping that keeps data from a results folder text."""
