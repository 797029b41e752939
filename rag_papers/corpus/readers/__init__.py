"""One module per corpus format, each turning a file (or one parsed record) into ``RawRecord``s.

``rag_papers.corpus.read`` picks the reader for a file; ``base`` holds what they share.
"""
