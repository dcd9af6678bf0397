"""Action-model node and its policy backends (see ARCHITECTURE.md, "The action-model node")."""
