"""What both agents use: the bookstore, its tools, the models, the scenarios and the result types."""
