"""What every part uses: errors, configs, the part registry, choices, quiet output, progress, faults, Markdown."""
