/* Compiles alone: nvswap/backing.h is self-contained. */
#include <nvswap/backing.h>
#include <nvswap/backing.h> /* and include-guarded */

int main(void)
{
	return 0;
}
