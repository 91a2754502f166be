"""What every part uses: errors, configs, the registry of parts, the choices a config offers, quiet output and
progress, fault injection for the kill-and-resume tests, Markdown tables."""
