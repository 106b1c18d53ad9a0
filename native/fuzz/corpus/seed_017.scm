(when (> 2 1) 'yes) (unless (> 2 1) 'no)
