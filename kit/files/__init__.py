"""Files the kit reads and writes safely: written whole or not at all, read only when regular and bounded, named only with what a path segment may hold."""
