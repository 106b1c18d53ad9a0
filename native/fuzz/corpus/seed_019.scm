(reverse (append '(1 2) '(3 4) '()))
