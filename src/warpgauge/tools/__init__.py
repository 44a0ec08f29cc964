"""Developer tools that ship with the package (the sanitizer driver)."""
